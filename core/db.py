"""Database connections in long-lived Celery worker processes."""

from django.db import close_old_connections


def celery_signals_connect() -> None:
    """Gives each task a usable connection, as Django does for each request.

    Workers keep their connection between tasks (``CELERY_DB_REUSE_MAX``), and Celery's Django
    fixup only recycles it every so many tasks. After PostgreSQL restarts, that connection is
    dead: without this, every later task of the process fails with "the connection is lost".
    ``close_old_connections`` closes a connection that has seen an error and is no longer usable
    (and one past ``CONN_MAX_AGE``); it costs no query otherwise."""
    from celery import signals

    def _recycle(task=None, **kwargs):
        # Only in a worker: a task applied eagerly runs inside its caller's connection and
        # transaction (a request, a test), which are not the task's to close.
        if task is not None and not getattr(task.request, "is_eager", False):
            close_old_connections()

    signals.task_prerun.connect(_recycle, weak=False)
    signals.task_postrun.connect(_recycle, weak=False)
