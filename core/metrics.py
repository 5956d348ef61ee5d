"""Prometheus exposition for every process of the deployment (docs/operations.md,
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

    @signals.worker_init.connect(weak=False)
    def _serve_metrics(**kwargs):
        # Counters a worker's processes increment (dead letters, stale events, latency,
        # triggers) are served by the worker itself: bound here, before the pool forks, so
        # that a port already taken stops the start.
        worker_metrics_serve()

    @signals.worker_process_init.connect(weak=False)
    def _pool_process_leaves_the_port(**kwargs):
        # A pool process inherits the listening socket when it forks: it closes its copy,
        # so that the port is the worker's alone (and free again once the worker exits).
        if _worker_metrics_server is not None:
            _worker_metrics_server.socket.close()


# --- a worker's own /metrics (docs/operations.md, "Metrics") ------------------------------
WORKER_METRICS_PORT_VARIABLE = "CELERY_METRICS_PORT"
WORKER_METRICS_ADDR_VARIABLE = "CELERY_METRICS_ADDR"
WORKER_METRICS_PORT_DEFAULT = 9808
# Loopback unless an operator names another address: a scraper on the same machine, or the
# address a container's network gives it (docs/security.md, "Who may scrape").
WORKER_METRICS_ADDR_DEFAULT = "127.0.0.1"

_worker_metrics_server = None


def worker_metrics_address() -> tuple[str, int] | None:
    """Where this worker serves its metrics (``CELERY_METRICS_ADDR``, ``CELERY_METRICS_PORT``),
    or None with the port ``0``."""
    raw = os.environ.get(WORKER_METRICS_PORT_VARIABLE, "").strip()
    try:
        port = int(raw) if raw else WORKER_METRICS_PORT_DEFAULT
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise SystemExit(
            f"Refusing to start: {WORKER_METRICS_PORT_VARIABLE}={raw!r} is not a port "
            "number (0 serves no metrics)."
        )
    if port == 0:
        return None
    addr = os.environ.get(WORKER_METRICS_ADDR_VARIABLE, "").strip()
    return addr or WORKER_METRICS_ADDR_DEFAULT, port


def worker_metrics_serve() -> None:
    """Starts the worker's /metrics server (in a thread of the worker's main process); a port
    already taken stops the start with a message naming ``CELERY_METRICS_PORT``."""
    global _worker_metrics_server
    address = worker_metrics_address()
    if address is None or _worker_metrics_server is not None:
        return
    addr, port = address
    try:
        _worker_metrics_server, _ = start_http_server(
            port, addr=addr, registry=_exposition_registry()
        )
    except OSError as exc:
        message = (
            f"{WORKER_METRICS_PORT_VARIABLE}={port}: cannot serve the worker's metrics on "
            f"{addr}:{port} ({exc.strerror or exc}); another process holds the port. Give "
            f"each worker of a machine its own {WORKER_METRICS_PORT_VARIABLE}, or 0 to "
            "serve none."
        )
        logging.getLogger(__name__).critical(
            "metrics.port_taken", extra={"detail": message}
        )
        raise SystemExit(f"Refusing to start: {message}") from None
    logging.getLogger(__name__).info(
        "metrics.serving", extra={"address": addr, "port": port}
    )
