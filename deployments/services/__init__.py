"""Writes of the deployments app, one module per sub-domain; functions with
keyword-only, typed arguments, named ``<entity>_<action>``:

- ``jobs``: a new job, its status and transitions, its key's record kept in step;
- ``attempts``: a worker's run of a job (``job_run``), its trigger attempts and their
  outcomes;
- ``reports``: statuses reported from outside (status-sync, GitHub).

``attempts`` and ``reports`` import ``jobs``, never each other
(docs/subsystems/executors.md, "The deployments app's modules"). Callers import from the
module that holds a name.
"""
