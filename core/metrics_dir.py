"""The folder in which the processes of one server share their metrics (prometheus_client's
multiprocess mode): a gunicorn arbiter's workers, a Celery worker's pool processes.

prometheus_client decides once, when it is first imported, whether samples go to files in
``PROMETHEUS_MULTIPROC_DIR`` or stay in the process: the folder must be in the environment
before anything creates a metric, and before the server forks its processes. So this module
imports nothing of prometheus_client, and the servers call ``metrics_dir_prepare`` first
thing: ``gunicorn.conf.py`` at the repository root when gunicorn reads it, the Celery
worker's constructor (``config/celery_worker.py``). See docs/security.md, "Metrics of every
process".
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def metrics_dir_prepare(*, server: str) -> str:
    """Returns the folder this server's processes share, named in the environment so that
    every process forked from here writes there.

    With ``PROMETHEUS_MULTIPROC_DIR`` set, that folder, as it is: the operator shares it
    between servers on purpose and empties it before they start. Otherwise a fresh folder
    of this server alone under the system's temporary directory (``TMPDIR``), empty by
    construction, removed when this process (the arbiter, the worker's main process) exits.
    """
    given = os.environ.get(MULTIPROC_DIR_VARIABLE)
    if given:
        os.makedirs(given, exist_ok=True)
        return given
    _folders_of_dead_servers_remove(server=server)
    path = tempfile.mkdtemp(prefix=f"prometheus-{server}-{os.getpid()}-")
    os.environ[MULTIPROC_DIR_VARIABLE] = path
    owner = os.getpid()

    def remove() -> None:
        # Forked children inherit this handler; only the process that made the folder
        # removes it.
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)
    return path


def _folders_of_dead_servers_remove(*, server: str) -> None:
    """A server killed outright (``kill -9``) leaves its folder behind: removed by the next
    one, once no process has the pid in its name."""
    for folder in Path(tempfile.gettempdir()).glob(f"prometheus-{server}-*-*"):
        pid = folder.name.split("-")[2]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass  # alive, as another user's process


def metrics_shared() -> bool:
    """Whether this process's metrics go to the shared folder: the folder is named and
    prometheus_client, when it was imported, chose its file-backed values."""
    from prometheus_client import values

    return bool(os.environ.get(MULTIPROC_DIR_VARIABLE)) and bool(
        getattr(values.ValueClass, "_multiprocess", False)
    )
