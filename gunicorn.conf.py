"""gunicorn settings. gunicorn reads ``gunicorn.conf.py`` from its working directory, so
``gunicorn config.wsgi`` started at the repository root (docs/operations.md, "Processes") runs with
them; elsewhere, pass ``-c <repository>/gunicorn.conf.py``.

Metrics: this server's workers share one folder of metric files, set up here in the arbiter
before any worker forks, so that every scrape of /metrics answers the sums over all workers
whichever worker serves it; a worker that exits is marked dead. An application started by
gunicorn without these settings refuses to serve (``config/wsgi.py``). See docs/security.md,
"Metrics of every process".
"""

import multiprocessing
import os
import sys

# The configuration is read before gunicorn puts its working directory on the path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from core.metrics_dir import metrics_dir_prepare

metrics_dir_prepare(server="gunicorn")

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# Sync workers: gthread with keep-alive was measured piling every connection onto one
# worker; sync workers were stable.
worker_class = "sync"
workers = int(os.environ.get("GUNICORN_WORKERS", multiprocessing.cpu_count() * 2 + 1))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "30"))
graceful_timeout = 30
# A worker is replaced after this many requests (a bound on whatever memory it might leak).
# A new worker imports Django and the application again, about 0.9 s of CPU here: at 10,000 a
# busy two-core server spent a few percent of its time starting workers, and a benchmark's
# window could lose one of its two workers for a second. A worker's memory stays flat at
# about 100 MB over 40,000 deliveries (docs/scaling.md, "Tunables that matter for
# throughput").
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", "50000"))
max_requests_jitter = max_requests // 10
accesslog = os.environ.get("GUNICORN_ACCESSLOG") or None
# gunicorn believes X-Forwarded-Proto (and sets wsgi.url_scheme from it) only from the proxies
# an operator names here; by default from none, not even 127.0.0.1, where any local process or
# a proxy that passes the client's header would be believed. Whether the application trusts
# the header is DJANGO_TRUST_X_FORWARDED_PROTO's to say (docs/security.md, "Deployment
# settings"). A unix socket's peer has no address: gunicorn always believes it.
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "")
# The longest request line gunicorn takes (its maximum; the default is 4094): as long as the
# proxy of deploy/nginx/ lets through, which answers a longer one 414 with a JSON body.
limit_request_line = 8190


def child_exit(server, worker):
    from core.metrics import process_mark_dead

    process_mark_dead(worker.pid)


def worker_exit(server, worker):
    # A worker that ends (recycled after max_requests, or at shutdown) exports the spans it
    # still holds first (core/tracing.py); its tracer provider was started when it loaded
    # config.wsgi, after the fork.
    from core.tracing import tracing_shutdown

    tracing_shutdown()
