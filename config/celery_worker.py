"""The ``celery worker`` program of this project (``config.celery_app.App.Worker``).

Its constructor sets up the folder in which the worker's pool processes share their metrics
(``core.metrics_dir``), before Celery's own constructor loads Django and with it every
metric, and before the pool forks: the worker's /metrics on ``CELERY_METRICS_PORT`` then
answers the sums over all its processes, with no variable to set. A prefork pool of several
processes whose metrics would not be shared is refused at start (``core.metrics``).
"""

from celery.apps.worker import Worker as CeleryWorker

from core.metrics_dir import metrics_dir_prepare


class Worker(CeleryWorker):
    def __init__(self, *args, **kwargs):
        metrics_dir_prepare(server="celery")
        super().__init__(*args, **kwargs)
