"""Tests: the real PostgreSQL and Redis of the machine (override with the environment)."""

import os

from ._helpers import (
    audit_signing_configure,
    database_binding_apply,
    database_timeouts_apply,
    env,
)
from .base import *  # noqa: F403
from .base import WEBHOOK_INTEGRATIONS

SECRET_KEY = env(
    "DJANGO_SECRET_KEY", default="test-insecure-key-6c1d9e0a2b3f4c5d6e7f8a9b0c1d2e3f"
)
AUDIT_SEAL_KEY = env(
    "AUDIT_SEAL_KEY", default="test-only-audit-seal-key-1a2b3c4d5e6f7a8b9c0d"
)
AUDIT_SIGNING_KEY, AUDIT_LOG_ORIGIN = audit_signing_configure(
    env(
        "AUDIT_SIGNING_KEY",
        default="PRIVATE+KEY+retrysafe.test/audit-log+7ec49881+"
        "Adh9RN2N45tVlQYJ5O0Gljdnyko5G+IUdRaOqMpwtW2R",
    )
)
DEBUG = False
ALLOWED_HOSTS = ["*"]
DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/app")
}
DATABASES["default"]["CONN_MAX_AGE"] = 0
database_binding_apply(DATABASES["default"])
database_timeouts_apply(DATABASES["default"], globals())
DATABASES["default"]["TEST"] = {"NAME": env("TEST_DATABASE_NAME", default=None)}
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/15")
# `make test-fast` runs the suite in parallel processes (pytest-xdist): each has a database of
# its own (pytest-django names it), and a Redis database of its own, counted down from the
# configured one, since tests read what was published.
_XDIST_WORKER = env("PYTEST_XDIST_WORKER", default="")
if _XDIST_WORKER and CELERY_BROKER_URL.startswith("redis://"):
    _base, _, _db = CELERY_BROKER_URL.rpartition("/")
    _index = int(_XDIST_WORKER.removeprefix("gw") or 0)
    CELERY_BROKER_URL = f"{_base}/{(int(_db or 0) - 1 - _index) % 16}"
    # Celery prefers CELERY_BROKER_URL from the environment to its configuration: without
    # this, every process would publish to the configured database and read another.
    os.environ["CELERY_BROKER_URL"] = CELERY_BROKER_URL
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Static files straight from the apps' folders: no collectstatic before a test run.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
# Login throttling is off for tests that log in through the test client; the test of the
# throttle turns it back on.
AXES_ENABLED = False
# Tests change sources in the database directly between requests of one process: read them
# for every request (the cache has tests of its own, which turn it on).
WEBHOOK_SOURCE_CACHE_SECONDS = env.float("WEBHOOK_SOURCE_CACHE_SECONDS", default=0)
API_CLIENT_CACHE_SECONDS = env.float("API_CLIENT_CACHE_SECONDS", default=0)

# The demo's integration (demo/): research documents behind a search index an operator
# switches down and back up, for the console's rehearsal of a failure that a replay fixes.
WEBHOOK_INTEGRATIONS = {**WEBHOOK_INTEGRATIONS, "demo": "demo.integration.integration"}
