"""The embedded default: runs with no environment at all.

SQLite in ``var/`` and kombu's filesystem transport as the Celery broker, so that web, worker
and beat run together on a fresh machine with no database or broker server. Only
``manage.py`` and ``make run`` (its ``Procfile``) use these settings by default; ``config.wsgi``
and the Celery app default to ``config.settings.production``.

``DEBUG`` is on by default here and the keys below are published: with a database server in
``DATABASE_URL``, or a host other than loopback in ``DJANGO_ALLOWED_HOSTS``, these settings
refuse to load unless ``DJANGO_DEBUG`` is set, to true or false, on purpose
(docs/security.md, "Deployment settings").
"""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from ._helpers import audit_signing_configure, env, host_is_loopback
from .base import *  # noqa: F403
from .base import BASE_DIR, DATABASES, WEBHOOK_INTEGRATIONS

DEBUG = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY = env(
    "DJANGO_SECRET_KEY",
    default="local-only-insecure-key-3f9a1c0e7b2d4e6f8a0b1c2d3e4f5a6b",
)
AUDIT_SEAL_KEY = env(
    "AUDIT_SEAL_KEY", default="local-only-audit-seal-key-9d8c7b6a5f4e3d2c1b0a"
)
# A published key, for the embedded default only: its checkpoints prove nothing to anyone.
AUDIT_SIGNING_KEY, AUDIT_LOG_ORIGIN = audit_signing_configure(
    env(
        "AUDIT_SIGNING_KEY",
        default="PRIVATE+KEY+retrysafe.local/audit-log+47419730+"
        "AadRkKkwZq4+4vp7prL23jv4yPxb6bkRI1I8to34j7SI",
    )
)
ALLOWED_HOSTS = env.list(
    "DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"]
)

VAR_DIR = Path(env("APP_VAR_DIR", default=str(BASE_DIR / "var")))

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["NAME"] = env(
        "SQLITE_PATH", default=str(VAR_DIR / "db.sqlite3")
    )
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # Web, worker and beat share the file: WAL lets readers and one writer work at once, and
    # IMMEDIATE transactions take the write lock up front instead of failing half-way.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="filesystem://localhost/")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "control_folder": str(_broker_dir / "control"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        # The transport polls its folder; kombu's default second is also how long a stopping
        # worker may sit in a poll before it sees the stop.
        "polling_interval": 0.2,
    }
    for _folder in ("queue", "control", "processed"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# How long the worker's timer thread sleeps at most, which a stopping worker waits out (a
# second by default): Ctrl-C in `make run` stops the worker well within honcho's five
# seconds.
CELERY_WORKER_TIMER_PRECISION = 0.2


if "DJANGO_DEBUG" not in os.environ:
    _production_like = []
    if DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        _production_like.append("DATABASE_URL names a database server")
    _public = [host for host in ALLOWED_HOSTS if not host_is_loopback(host)]
    if _public:
        _production_like.append(
            f"DJANGO_ALLOWED_HOSTS names {', '.join(_public)}, not only loopback"
        )
    if _production_like:
        raise ImproperlyConfigured(
            "config.settings.local (DEBUG on, published keys) is the embedded default of a "
            f"developer's machine, but {' and '.join(_production_like)}. Run a deployment "
            "with DJANGO_SETTINGS_MODULE=config.settings.production; to run the local "
            "settings here on purpose, set DJANGO_DEBUG (true or false)."
        )

# The demo's integration (demo/): research documents behind a search index an operator
# switches down and back up, for the console's rehearsal of a failure that a replay fixes.
WEBHOOK_INTEGRATIONS = {**WEBHOOK_INTEGRATIONS, "demo": "demo.integration.integration"}
