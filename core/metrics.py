"""Prometheus exposition for every process of the deployment (docs/architecture.md,
"Metrics").

Each app defines its own counters and histograms (``<app>/metrics.py``), incremented where the
thing happens (web or worker process). Gauges that describe the database's state (queue lag,
stuck idempotency keys) are collected at scrape time from the database, so they are right
however many processes run: each app registers those collectors here from its
``AppConfig.ready``.
"""

import logging
import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# In multiprocess mode every metric is backed by a file in this folder: it must exist before
# any is created. The apps define theirs with the classes re-exported here, so that this
# module runs first. The servers name the folder before anything imports this module
# (core/metrics_dir.py); one that an operator names is emptied by the operator.
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

__all__ = [
    "Counter",
    "GaugeMetricFamily",
    "Histogram",
    "metrics_exposition",
    "scrape_collector_register",
]

# --- exposition -----------------------------------------------------------------------------
# With several processes (gunicorn workers, Celery pool processes), each writes its samples to
# files in PROMETHEUS_MULTIPROC_DIR and /metrics aggregates them (prometheus_client's
# multiprocess mode). Without it, the process's own registry is served (a single process).


def _multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


# Collectors read at scrape time (database state), registered by the apps.
_scrape_collectors: list[Collector] = []


def scrape_collector_register(collector: Collector) -> None:
    """Adds a collector that ``/metrics`` runs at each scrape, in whatever process answers."""
    _scrape_collectors.append(collector)


def metrics_exposition() -> tuple[bytes, str]:
    registry = _exposition_registry()
    for collector in _scrape_collectors:
        registry.register(collector)
    return generate_latest(registry), CONTENT_TYPE_LATEST


def process_mark_dead(pid: int) -> None:
    """Called when a worker process exits, so that its live gauges stop counting."""
    if _multiprocess_dir():
        multiprocess.mark_process_dead(pid)


def _exposition_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    if _multiprocess_dir():
        multiprocess.MultiProcessCollector(registry)
    else:
        for collector in list(REGISTRY._collector_to_names):
            registry.register(collector)
    return registry


def celery_signals_connect() -> None:
    from celery import signals

    @signals.worker_init.connect(weak=False)
    def _refuse_unshared_pool(sender=None, **kwargs):
        # A prefork pool of several processes whose metrics stay in each process would serve
        # one process's share on CELERY_METRICS_PORT: refused before the pool forks.
        from .metrics_dir import metrics_shared

        pool = getattr(sender, "pool_cls", "")
        prefork = "prefork" in f"{getattr(pool, '__module__', '')} {pool}"
        concurrency = getattr(sender, "concurrency", 1)
        several = isinstance(concurrency, int) and concurrency > 1
        if prefork and several and not metrics_shared():
            message = (
                f"a prefork pool of {concurrency} processes would keep its metrics per "
                "process: start the worker with `celery -A config worker` (it sets up "
                "PROMETHEUS_MULTIPROC_DIR before loading the application), or name a "
                "folder in PROMETHEUS_MULTIPROC_DIR before anything imports "
                "prometheus_client."
            )
            logging.getLogger(__name__).critical(
                "metrics.unshared_pool", extra={"detail": message}
            )
            raise SystemExit(f"Refusing to start: {message}")

    @signals.worker_process_shutdown.connect(weak=False)
    def _shutdown(pid=None, **kwargs):
        process_mark_dead(pid or os.getpid())

    @signals.worker_ready.connect(weak=False)
    def _serve_metrics(**kwargs):
        # Counters a worker increments (dead letters, stale events, latency) live in its own
        # processes: on a machine without a web process, the worker serves them itself.
        port = os.environ.get("CELERY_METRICS_PORT")
        if port:
            start_http_server(
                int(port),
                addr=os.environ.get("CELERY_METRICS_ADDR", "0.0.0.0"),  # noqa: S104
                registry=_exposition_registry(),
            )
