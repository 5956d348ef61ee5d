"""The embedded default: runs with no environment at all.

SQLite in ``var/`` and kombu's filesystem transport as the Celery broker, so that web, worker
and beat run together on a fresh machine with no database or broker server.
"""

from pathlib import Path

from .base import *  # noqa: F403
from .base import BASE_DIR, DATABASES, audit_signing_configure, env

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

CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "control_folder": str(_broker_dir / "control"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
    }
    for _folder in ("queue", "control", "processed"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
