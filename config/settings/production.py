"""Production: PostgreSQL and Redis or RabbitMQ from the environment, no defaults for secrets."""

from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)
from django.core.exceptions import ImproperlyConfigured

from ._helpers import (
    audit_signing_configure,
    database_binding_apply,
    database_timeouts_apply,
    env,
    two_factor_mode_check,
)
from .base import *  # noqa: F403
from .base import BENCH_ENDPOINTS

# The floor endpoints under /_bench/ answer without authentication and write to a table of
# their own: never served with these settings. The benchmarks use config.settings.bench.
if BENCH_ENDPOINTS:
    raise ImproperlyConfigured(
        "BENCH_ENDPOINTS is on: production settings never serve the benchmark endpoints "
        "under /_bench/. Unset it (benchmarks run with config.settings.bench)."
    )

SECRET_KEY = env("DJANGO_SECRET_KEY")
# What `check --deploy` only warns about (security.W009) stops the start: a key that is
# short, made of few characters, or one of Django's startproject keys.
if (
    len(SECRET_KEY) < SECRET_KEY_MIN_LENGTH
    or len(set(SECRET_KEY)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS
    or SECRET_KEY.startswith(SECRET_KEY_INSECURE_PREFIX)
):
    raise ImproperlyConfigured(
        f"DJANGO_SECRET_KEY must be at least {SECRET_KEY_MIN_LENGTH} characters long, with "
        f"at least {SECRET_KEY_MIN_UNIQUE_CHARACTERS} different ones, and not start with "
        f"{SECRET_KEY_INSECURE_PREFIX!r}: generate one, e.g. with "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
# "*" accepts any Host header: links in mails and redirects could name an attacker's host.
if "*" in ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "DJANGO_ALLOWED_HOSTS must name the hosts this deployment answers for, not '*'"
    )
DATABASES = {"default": env.db("DATABASE_URL")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool(
    "DATABASE_CONN_HEALTH_CHECKS", default=True
)
database_binding_apply(DATABASES["default"])
database_timeouts_apply(DATABASES["default"], globals())
# Behind PgBouncer in transaction mode, server-side cursors cannot be used.
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env.bool(
    "DISABLE_SERVER_SIDE_CURSORS", default=False
)
CELERY_BROKER_URL = env("CELERY_BROKER_URL")
# The key of the sealed audit trail (docs/security.md, "The retired HMAC chain"): kept out of the
# database, so that someone who can write to the database cannot recompute the chain.
AUDIT_SEAL_KEY = env("AUDIT_SEAL_KEY")
if len(AUDIT_SEAL_KEY) < 32:
    raise ImproperlyConfigured("AUDIT_SEAL_KEY must be at least 32 characters long")
# The Ed25519 key that signs the verifiable log's checkpoints (docs/security.md, "Verifiable
# log"): never stored in the database. Its verifier key is public (GET /audit/public-key).
AUDIT_SIGNING_KEY, AUDIT_LOG_ORIGIN = audit_signing_configure(env("AUDIT_SIGNING_KEY"))

# DJANGO_HTTPS=false serves plain HTTP: TLS terminated by a proxy on the same host, or a local
# production-like run.
HTTPS = env.bool("DJANGO_HTTPS", default=True)
# X-Forwarded-Proto is a header any client can send: it is believed only when the operator
# says a proxy in front sets it (and strips the client's own), e.g. TLS terminated by a load
# balancer with DJANGO_HTTPS on. Otherwise a forged "https" would pass for a secure request.
if env.bool("DJANGO_TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env.int(
    "DJANGO_SECURE_HSTS_SECONDS", default=31536000 if HTTPS else 0
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
SESSION_COOKIE_HTTPONLY = True
# Superusers can do everything the console allows: their login needs a second factor
# (docs/security.md, "Second factor"; enrol with manage.py admin_2fa enrol USERNAME).
ADMIN_TWO_FACTOR = two_factor_mode_check(
    env.str("ADMIN_TWO_FACTOR", default="superusers")
)
X_FRAME_OPTIONS = "DENY"
