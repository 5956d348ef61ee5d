"""gunicorn settings for production (``gunicorn -c config/gunicorn.conf.py config.wsgi``)."""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
# Sync workers: PERF-NOTES measured them stable where gthread with keep-alive was not.
worker_class = "sync"
workers = int(os.environ.get("GUNICORN_WORKERS", multiprocessing.cpu_count() * 2 + 1))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = 30
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "10000"))
max_requests_jitter = 1000
accesslog = os.environ.get("GUNICORN_ACCESSLOG") or None
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")


def child_exit(server, worker):
    from core.metrics import process_mark_dead

    process_mark_dead(worker.pid)
