"""The ``celery worker`` program of this project (``config.celery_app.App.Worker``).

Its constructor sets up the folder in which the worker's pool processes share their metrics
(``core.metrics_dir``), before Celery's own constructor loads Django and with it every
metric, and before the pool forks: the worker's /metrics on ``CELERY_METRICS_PORT`` then
answers the sums over all its processes, with no variable to set. A prefork pool of several
processes whose metrics would not be shared is refused at start (``core.metrics``).

Its pool processes ignore SIGTERM: the worker's main process alone decides how they stop.
A SIGTERM sent to the worker's whole process group (honcho's Ctrl-C in ``make run``, systemd's
default ``KillMode=control-group``) is then the main process's warm shutdown, which lets each
pool process finish its task and exit, instead of pool processes killed mid-task, one of them
perhaps holding the pool's queue lock, and a main process that waits on that lock until it is
killed (docs/scaling.md, "Stopping a worker"). A hard time limit still ends a pool process
(Celery follows its SIGTERM with SIGKILL).
"""

import signal

from celery import signals
from celery.apps.worker import Worker as CeleryWorker

from core.metrics_dir import metrics_dir_prepare


class Worker(CeleryWorker):
    def __init__(self, *args, **kwargs):
        metrics_dir_prepare(server="celery")
        super().__init__(*args, **kwargs)


@signals.worker_process_init.connect(weak=False)
def _pool_process_ignores_sigterm(**kwargs):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
