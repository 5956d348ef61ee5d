"""Settings shared by every environment.

Configuration comes from the environment (django-environ). The environment-specific modules
(local, production, test) decide the defaults; this module holds what does not change.
"""

from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from ._helpers import (
    database_binding_apply,
    database_timeouts_apply,
    env,
    env_renamed,
    inbox_dedup_days_check,
    otel_disabled_instrumentations_check,
    otel_endpoint_check,
    otel_key_mode_check,
    otel_service_name_check,
    two_factor_mode_check,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent

DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])

INSTALLED_APPS = [
    "core.admin_config.AuditAdminConfig",  # django.contrib.admin, on the console's own site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_results",
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "core",
    "trail",
    "webhooks",
    "idempotency",
    "research",
    "deployments",
    "audit",
    "demo",
    "ops",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "core.logging.CorrelationIdMiddleware",
    # POST /webhooks/<slug>/ leaves here: none of the middleware below has work for it.
    "webhooks.middleware.WebhookFastLaneMiddleware",
    # Bodies declared over the limit, and multipart bodies outside the admin's forms (no view
    # takes uploads), are refused here, before the sessions, CSRF or a view read them.
    "core.middleware.RequestBodyBoundMiddleware",
    # The admin's statements planned for their values, never prepared (core/plans.py).
    "core.plans.ConsolePlansMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_otp.middleware.OTPMiddleware",  # request.user.is_verified()
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as its documentation asks: turns a locked-out login into a 429.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db(
        "DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'var' / 'db.sqlite3'}"
    )
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"].setdefault(
    "CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=60)
)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

database_binding_apply(DATABASES["default"])

# The inbox's id indexes hold the received time as a covering column on PostgreSQL (a
# model index's ``include``); SQLite, which has none, builds them without it, which
# Django's models.W040 warns of at every command. Nothing else depends on it.
SILENCED_SYSTEM_CHECKS = ["models.W040"]

# --- Bounded waits for the database (docs/scaling.md, "Database timeouts") -----------------
# Every process: libpq gives up connecting after DATABASE_CONNECT_TIMEOUT_SECONDS, and TCP
# keepalives (and TCP_USER_TIMEOUT, for data sent and never acknowledged) find a link that
# died under an idle or a busy connection.
DATABASE_CONNECT_TIMEOUT_SECONDS = env.int(
    "DATABASE_CONNECT_TIMEOUT_SECONDS", default=3
)
DATABASE_KEEPALIVES_IDLE_SECONDS = env.int(
    "DATABASE_KEEPALIVES_IDLE_SECONDS", default=10
)
DATABASE_KEEPALIVES_INTERVAL_SECONDS = env.int(
    "DATABASE_KEEPALIVES_INTERVAL_SECONDS", default=3
)
DATABASE_KEEPALIVES_COUNT = env.int("DATABASE_KEEPALIVES_COUNT", default=3)
# The server's side of every connection gets the same keepalives and user timeout (startup
# options): a process cut off by a partition in the middle of a transaction gives up on its
# side, and the server ends the session on its own, its transaction rolled back and its row
# locks released, instead of keeping it "idle in transaction" until the operating system's
# keepalives of two hours (docs/scaling.md, "Database timeouts"). false behind a pooler that
# refuses startup options (PgBouncer: its idle_transaction_timeout plays that part).
DATABASE_SERVER_KEEPALIVES = env.bool("DATABASE_SERVER_KEEPALIVES", default=True)
# Every connection turns PostgreSQL's JIT compilation off (a startup option): the product's
# statements run in milliseconds, and one the planner estimates expensive (an admin search
# for an older event over a month of partitions) spent 4.4 s compiling before 19 ms of work,
# near the web's statement timeout (docs/scaling.md, "Database timeouts"). false behind a
# pooler that refuses startup options: then ALTER ROLE ... SET jit = off.
DATABASE_JIT_OFF = env.bool("DATABASE_JIT_OFF", default=True)
# And no parallel workers (max_parallel_workers_per_gather=0, a startup option): the same
# search started two, 14 of its 15 ms, for ten rows; the product's largest periodic
# statement (the dashboard's hourly count over ten million rows) took 1.31 s with or
# without them. false behind a pooler that refuses startup options, as above.
DATABASE_PARALLEL_QUERY_OFF = env.bool("DATABASE_PARALLEL_QUERY_OFF", default=True)
# Web processes only (config/wsgi.py says a process is one: APP_PROCESS=web): a statement
# is ended by the server after WEB_STATEMENT_TIMEOUT_SECONDS, and any wait for an answer by
# the client one second later (core/pgbackend/), so that a request never waits for a
# database that stopped answering until gunicorn kills its worker: it is a 503. Workers,
# beat, the relay, migrations and manage.py have no such bound (their batches set their
# own lock timeouts). 0 turns it off. Behind a pooler that refuses startup options
# (PgBouncer), WEB_STATEMENT_TIMEOUT_ON_SERVER=false leaves the server's part to the pooler.
APP_PROCESS = env("APP_PROCESS", default="")
WEB_STATEMENT_TIMEOUT_SECONDS = env.float("WEB_STATEMENT_TIMEOUT_SECONDS", default=5)
WEB_STATEMENT_TIMEOUT_ON_SERVER = env.bool(
    "WEB_STATEMENT_TIMEOUT_ON_SERVER", default=True
)
WEB_ANSWER_MARGIN_SECONDS = 1.0

database_timeouts_apply(DATABASES["default"], globals())
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Admin logins are throttled (django-axes): after AXES_FAILURE_LIMIT failures for one username
# from one address (an IPv6 address counts as its /64), that pair is locked out for
# AXES_COOLOFF_TIME. core.login_throttle adds progressive lockouts of a username from any
# address and of an address for any username, after ADMIN_LOGIN_WIDE_FAILURE_LIMIT failures.
# Attempts are stored in the database, so the limits hold across every web process.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "core.login_throttle.LoginThrottleHandler"
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("AXES_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# A refused attempt during a lockout is not recorded: the lockout ends on time, so guessing on
# cannot keep a username locked out.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_VERBOSE = False
ADMIN_LOGIN_WIDE_FAILURE_LIMIT = env.int("ADMIN_LOGIN_WIDE_FAILURE_LIMIT", default=20)
ADMIN_LOGIN_WIDE_COOLOFF_SECONDS = env.int(
    "ADMIN_LOGIN_WIDE_COOLOFF_SECONDS", default=60
)
# A second factor for the admin (core/admin_site.py): off, offered (staff who enrolled a TOTP
# device must use it), superusers (superusers must have one; production's default) or staff.
ADMIN_TWO_FACTOR = env.str("ADMIN_TWO_FACTOR", default="offered")

two_factor_mode_check(ADMIN_TWO_FACTOR)
OTP_TOTP_ISSUER = env.str("OTP_TOTP_ISSUER", default="Webhook inbox audit console")
# Behind TRUSTED_PROXY_COUNT reverse proxies that each append to X-Forwarded-For, the client is
# the entry the first of them appended; with none, only the peer address counts, so that a forged
# X-Forwarded-For can neither dodge a lockout nor lock someone else out.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
AXES_CLIENT_IP_CALLABLE = "core.security.client_ip"

AUTH_PASSWORD_VALIDATORS = [
    {
        "NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"
    },
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# The zone the console shows every time in (stored times are UTC whatever it is); the
# console's formats give every time to the second with this zone's name (docs/console.md).
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = ["config.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# Files served at the site's root by WhiteNoise, before any view: /favicon.ico, which every
# browser asks for (a 404 there was a console error and a WARNING log line per page).
WHITENOISE_ROOT = BASE_DIR / "core" / "public"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Django REST framework ---------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["core.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["core.permissions.RoleRequired"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.JSONObjectParser"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.CursorPage",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "core.exceptions.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Retry-safe webhook inbox and CI/CD trigger API",
    "VERSION": "1.0.0",
    # What every path answers besides its operations (docs/http-api.md, "API schema").
    "DESCRIPTION": (
        "Every error is JSON with a stable `error` code. Besides the operations listed: "
        "a method a path does not serve is 405 with `Allow` (an API path answers "
        '`{"error": "method_not_allowed"}`, the webhook endpoint no body); `HEAD` is '
        "served wherever `GET` is, without the body; `OPTIONS` on an API path is 200 "
        "with `Allow` and a short JSON description of the path (after the token and "
        "its role, like every API request), on the webhook endpoint 405. A request "
        "line longer than 8190 bytes is refused before any path: 414 "
        '`{"error": "uri_too_long"}` behind the proxy of deploy/nginx/ (gunicorn alone '
        "answers its own 414 page)."
    ),
    "SERVE_INCLUDE_SCHEMA": False,
    # The operator API's replayable statuses, apart from the other ``status`` fields'.
    "ENUM_NAME_OVERRIDES": {
        "ReplayableStatusEnum": ["dead_lettered", "failed"],
        "StatusEnum": "deployments.models.JobStatus",
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.schema.error_responses_postprocess",
        "webhooks.schema.webhook_receive_postprocess",
        "deployments.schema.job_links_postprocess",
    ],
}

# --- Celery: at-least-once delivery, stated explicitly ------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="")
CELERY_TASK_ACKS_LATE = True  # a message is acked only once its task finished
CELERY_TASK_REJECT_ON_WORKER_LOST = (
    True  # a killed worker's message goes back to the queue
)
CELERY_WORKER_PREFETCH_MULTIPLIER = (
    1  # a worker holds at most one unacked message per process
)
# A task running when the broker's connection is lost runs on to its end (the pool processes
# ignore the SIGTERM a cancel would send; config/celery_worker.py): its work is idempotent, and
# its message, not acknowledged on the lost connection, comes back and finds it done.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True  # results are stored only where a task asks for it
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
# Time limits stay well below the broker's visibility timeout, so that Redis never redelivers
# a message whose task is still legitimately running.
CELERY_BROKER_VISIBILITY_TIMEOUT = env.int(
    "CELERY_BROKER_VISIBILITY_TIMEOUT", default=3600
)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=300)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=240)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_BROKER_VISIBILITY_TIMEOUT
}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_BROKER_VISIBILITY_TIMEOUT
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Publishing happens in the relays (and for a bulk replay job's next task): fail fast when the
# broker is down. The row stays waiting, its stamp rolls back, and the next round publishes it.
CELERY_BROKER_CONNECTION_TIMEOUT = env.float(
    "CELERY_BROKER_CONNECTION_TIMEOUT", default=2.0
)
CELERY_TASK_PUBLISH_RETRY = False
# Celery's Django fixup closes the connection around every task unless this is set.
CELERY_DB_REUSE_MAX = env.int("CELERY_DB_REUSE_MAX", default=1000)
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# A consumer whose reconnect after a lost broker connection cannot end the worker.
CELERY_WORKER_CONSUMER = "config.celery_worker:Consumer"

# --- Webhook schemes and integrations -------------------------------------------------------
# What a source's ``scheme`` may name: a signature scheme's class, a generic one of the inbox or
# a producer's own in its integration's package (docs/subsystems/inbox.md, "Integrations").
# Adding one is one class and one line here.
WEBHOOK_SCHEMES = {
    "hmac-sha256": "webhooks.schemes.HmacSha256Scheme",
    "standard-webhooks": "webhooks.schemes.StandardWebhooksScheme",
    "github": "integrations.github.scheme.GitHubScheme",
}
# What a source's ``handler`` may name: each integration is a package under integrations/ that
# reads its producer's envelope at ingest and applies its events at processing
# (docs/subsystems/inbox.md, "Integrations"). Adding one is its package and one line here.
WEBHOOK_INTEGRATIONS = {
    "research": "integrations.research.integration",
    "github": "integrations.github.integration",
}

# --- Product tunables (seconds unless named otherwise) ------------------------------------
WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS = env.int(
    "WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS", default=300
)
WEBHOOK_MAX_BODY_BYTES = env.int("WEBHOOK_MAX_BODY_BYTES", default=1048576)
# How long a web process trusts what it read of an API client (its token's client, active):
# a client deactivated in the admin is refused by every process within this. 0 reads it for
# every request.
API_CLIENT_CACHE_SECONDS = env.float("API_CLIENT_CACHE_SECONDS", default=2)
# How long a web process serves a source and its secrets from what it read last, instead of
# reading them for every request: a source disabled or a secret rotated elsewhere reaches every
# process within this (a signature no remembered secret verifies is checked against the
# database at once). 0 reads them for every request.
WEBHOOK_SOURCE_CACHE_SECONDS = env.float("WEBHOOK_SOURCE_CACHE_SECONDS", default=2)
IDEMPOTENCY_KEY_TTL_SECONDS = env.int("IDEMPOTENCY_KEY_TTL_SECONDS", default=86400)
INBOX_MAX_ATTEMPTS = env.int("INBOX_MAX_ATTEMPTS", default=8)
INBOX_RETRY_BASE_SECONDS = env.float("INBOX_RETRY_BASE_SECONDS", default=2)
INBOX_RETRY_MAX_SECONDS = env.float("INBOX_RETRY_MAX_SECONDS", default=3600)
INBOX_PROCESSING_LEASE_SECONDS = env.int("INBOX_PROCESSING_LEASE_SECONDS", default=300)
INBOX_REDISPATCH_AFTER_SECONDS = env.int("INBOX_REDISPATCH_AFTER_SECONDS", default=60)
DEPLOY_REDISPATCH_AFTER_SECONDS = env.int("DEPLOY_REDISPATCH_AFTER_SECONDS", default=60)
DEPLOY_SIMULATED_SECONDS = env.float("DEPLOY_SIMULATED_SECONDS", default=1)

# --- The outbox relay (docs/subsystems/relay.md) ---------------------------------------------
# Every worker runs a relay that publishes committed work (new events, retries that came due,
# new jobs) to the broker. It polls the database: at once while batches come back full, after a
# pause in proportion to the rate it takes rows at while work arrives, up to
# RELAY_IDLE_POLL_SECONDS when idle.
RELAY_ENABLED = env.bool("RELAY_ENABLED", default=True)
# On PostgreSQL one relay publishes at a time (it holds an advisory lock); the others stand by
# and try to take over every RELAY_STANDBY_POLL_SECONDS (docs/subsystems/relay.md, "One relay
# publishes at a time"). Off: every relay publishes, sharing the rows.
RELAY_ONE_ACTIVE = env.bool("RELAY_ONE_ACTIVE", default=True)
RELAY_STANDBY_POLL_SECONDS = env.float("RELAY_STANDBY_POLL_SECONDS", default=1.0)
# How often each relay sweeps every outbox (publishes again what a lost message left behind).
# INBOX_SWEEP_INTERVAL_SECONDS, its name when the inbox was the only outbox, is still read.
RELAY_SWEEP_INTERVAL_SECONDS = env_renamed(
    "float",
    "RELAY_SWEEP_INTERVAL_SECONDS",
    former="INBOX_SWEEP_INTERVAL_SECONDS",
    default=30,
)
RELAY_BATCH_LIMIT = env.int("RELAY_BATCH_LIMIT", default=500)  # rows per claim
# PostgreSQL: how often the relay looks for inbox rows waiting since before yesterday (a
# replayed or retried event of an older day); between looks, its claims read the time
# partitions from yesterday on (docs/scaling.md, "Time partitions of the inbox").
RELAY_LOOK_BACK_SECONDS = env.float("RELAY_LOOK_BACK_SECONDS", default=1.0)
RELAY_IDLE_POLL_SECONDS = env.float("RELAY_IDLE_POLL_SECONDS", default=0.025)
# The pause after a round that took rows but not a full batch: rows arriving meanwhile go out
# together, in fewer rounds and fuller messages (docs/subsystems/relay.md, "How fast it wakes").
# The whole pause from the rate (rows of a round over the time since the relay's previous round
# began) at which it collects RELAY_BUSY_FILL_ROWS rows; below that rate, that share of it, so
# that a lightly loaded relay stays quick.
RELAY_BUSY_POLL_SECONDS = env.float("RELAY_BUSY_POLL_SECONDS", default=0.1)
RELAY_BUSY_FILL_ROWS = env.int("RELAY_BUSY_FILL_ROWS", default=100)
RELAY_HEARTBEAT_SECONDS = env.float("RELAY_HEARTBEAT_SECONDS", default=5)
# /readyz says the relays do not keep up when a row has waited longer than this.
RELAY_LAG_ALERT_SECONDS = env.float("RELAY_LAG_ALERT_SECONDS", default=5)
# Inbox events per processing message: a worker claims them in one statement and processes
# each in its own transaction.
INBOX_BATCH_SIZE = env.int("INBOX_BATCH_SIZE", default=50)
# Flow control: inbox rows a relay keeps in flight (published, not yet finished by a worker)
# per process of its worker's pool; beyond that, new rows wait in the database and go out as
# full messages once half of it is done. 0 turns flow control off.
RELAY_IN_FLIGHT_LIMIT = env.int("RELAY_IN_FLIGHT_LIMIT", default=2 * INBOX_BATCH_SIZE)

# Floor endpoints under /_bench/ for the benchmarks; never on in production.
BENCH_ENDPOINTS = env.bool("BENCH_ENDPOINTS", default=False)

# Django's own cap on in-memory request bodies, and the declared length over which any body
# but a webhook's is refused before it is read (core/middleware.py); the webhook view enforces
# its own limit on the raw body before anything is parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(WEBHOOK_MAX_BODY_BYTES, 2621440)
# No view takes uploads: a multipart body's files are skipped, never stored (core/uploads.py).
FILE_UPLOAD_HANDLERS = ["core.uploads.FilesSkippedUploadHandler"]

# --- Tracing (core/tracing.py; docs/operations.md, "Tracing") --------------------------------
# Off unless the standard OpenTelemetry variable names a collector's OTLP/HTTP base
# (http://collector:4318): spans then go to its /v1/traces. A value that is not an http(s) URL
# refuses the start. The SDK's own OTEL_* variables (OTEL_TRACES_SAMPLER,
# OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS, OTEL_BSP_*) apply as usual.
OTEL_EXPORTER_OTLP_ENDPOINT = otel_endpoint_check(
    env("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
)
OTEL_SERVICE_NAME = otel_service_name_check(
    env("OTEL_SERVICE_NAME", default="retrysafe")
)
# An idempotency key on a span: "hash" (a SHA-256 hex prefix of 16) or "raw" (the key itself).
OTEL_RECORD_IDEMPOTENCY_KEY = otel_key_mode_check(
    env("OTEL_RECORD_IDEMPOTENCY_KEY", default="hash")
)
# The Django instrumentation's middleware goes right after this one: the webhook's fast lane
# answers its deliveries before it, each in a server span of its own (core/tracing.py).
TRACING_MIDDLEWARE_AFTER = "webhooks.middleware.WebhookFastLaneMiddleware"
# Instrumentations left out (django, celery, psycopg, httpx), as the SDK's auto-instrumentation
# reads the variable (docs/bench-log/2026-12-06.md, "What tracing costs ingest").
OTEL_PYTHON_DISABLED_INSTRUMENTATIONS = otel_disabled_instrumentations_check(
    env.list("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", default=[])
)

# --- Logging: structured JSON, one line per record -----------------------------------------
LOG_LEVEL = env("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {
                "asctime": "time",
                "levelname": "level",
                "name": "logger",
            },
        },
    },
    "filters": {"correlation": {"()": "core.logging.CorrelationIdFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "filters": ["correlation"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        "celery": {"level": "INFO"},
        # httpx logs every request's full URL at INFO, query included (a trigger URL may
        # carry a token): the job worker logs its attempts itself, without it.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}

# Error pages and reports hide connection URLs and credentials as well as Django's defaults.
DEFAULT_EXCEPTION_REPORTER_FILTER = (
    "core.reporting.SecretsHidingExceptionReporterFilter"
)

# --- Admin audit console -------------------------------------------------------------------
# AUDIT_SEAL_KEY, the HMAC key of the retired sealed trail (audit_verify still checks its
# seals), is set by each environment's module: production has no default for it.
# Every INTERVAL, ledger rows older than the HORIZON enter the verifiable log, BATCH_SIZE per
# transaction, whatever their id (docs/subsystems/log.md, "The verifiable log"); audit_verify
# names an entry logged more than LOOKBACK after entries newer than the time it claims.
AUDIT_SEAL_INTERVAL_SECONDS = env.float("AUDIT_SEAL_INTERVAL_SECONDS", default=60)
AUDIT_SEAL_HORIZON_SECONDS = env.int("AUDIT_SEAL_HORIZON_SECONDS", default=60)
AUDIT_SEAL_LOOKBACK_SECONDS = env.int("AUDIT_SEAL_LOOKBACK_SECONDS", default=86400)
AUDIT_SEAL_BATCH_SIZE = env.int("AUDIT_SEAL_BATCH_SIZE", default=5000)
# Every INTERVAL, the inbox's figures of the last 25 hours are counted again by the hour, for
# the dashboard, which reads live only the events received since (docs/scaling.md, "The
# dashboard at scale"): how old its counted figures may be.
DASHBOARD_FIGURES_INTERVAL_SECONDS = env.float(
    "DASHBOARD_FIGURES_INTERVAL_SECONDS", default=300
)
# A bulk replay job (webhooks/bulk_replay.py) runs as a chain of tasks: each replays chunks of
# CHUNK_SIZE rows (one transaction each, with the job's progress) for at most SLICE_SECONDS,
# well inside the task time limits, then queues the next. A job whose lease (renewed by every
# chunk) has run out was interrupted and may be resumed. A job given a rate replays a slice of
# about RATE_TICK_SECONDS worth of events at a time, each task queueing the next for when the
# schedule says (docs/subsystems/processing.md, "A bulk replay job").
BULK_REPLAY_CHUNK_SIZE = env.int("BULK_REPLAY_CHUNK_SIZE", default=200)
BULK_REPLAY_SLICE_SECONDS = env.float("BULK_REPLAY_SLICE_SECONDS", default=30)
BULK_REPLAY_LEASE_SECONDS = env.int(
    "BULK_REPLAY_LEASE_SECONDS", default=CELERY_TASK_TIME_LIMIT + 300
)
BULK_REPLAY_RATE_TICK_SECONDS = env.float("BULK_REPLAY_RATE_TICK_SECONDS", default=0.5)

# --- The verifiable log (docs/security.md, "Verifiable log") -------------------------------
# AUDIT_SIGNING_KEY, the Ed25519 key that signs the log's checkpoints, is set by each
# environment's module with ``audit_signing_configure``: production has no default for it.
# Each checkpoint is also written, as it is made, to a file in AUDIT_CHECKPOINT_DIR and POSTed
# (text/plain) to AUDIT_WITNESS_URL: copies outside the database. Both are optional. The POST
# is checked as a trigger's is (DEPLOY_TRIGGER_DENY_NETWORKS) and ends within
# AUDIT_WITNESS_TIMEOUT_SECONDS as a whole.
AUDIT_CHECKPOINT_DIR = env("AUDIT_CHECKPOINT_DIR", default="")
AUDIT_WITNESS_URL = env("AUDIT_WITNESS_URL", default="")
AUDIT_WITNESS_TIMEOUT_SECONDS = env.float("AUDIT_WITNESS_TIMEOUT_SECONDS", default=10)
# An evidence bundle (docs/security.md, "Evidence bundles") tells at most ENTRIES_PER_KIND
# records of each kind of its story (the first half and the latest half; at least 2) and
# carries at most BODY_BYTES of raw bodies; it names what it leaves out.
AUDIT_BUNDLE_ENTRIES_PER_KIND = env.int("AUDIT_BUNDLE_ENTRIES_PER_KIND", default=100)
AUDIT_BUNDLE_BODY_BYTES = env.int("AUDIT_BUNDLE_BODY_BYTES", default=8 * 1024 * 1024)
if AUDIT_BUNDLE_ENTRIES_PER_KIND < 2 or AUDIT_BUNDLE_BODY_BYTES < 0:
    raise ImproperlyConfigured(
        "AUDIT_BUNDLE_ENTRIES_PER_KIND must be at least 2 (the first and the latest "
        "record of a kind) and AUDIT_BUNDLE_BODY_BYTES at least 0"
    )

# --- Deployments and builds: executor, worker lease, idempotency-key retention -------------
DEPLOY_EXECUTOR = env("DEPLOY_EXECUTOR", default="simulated")
DEPLOY_SIMULATED_FAILURE_RATE = env.float("DEPLOY_SIMULATED_FAILURE_RATE", default=0.0)
# A running job whose worker has not finished it after this long is taken as lost (the task's
# hard time limit has long passed): it is failed, never handed to an executor a second time.
DEPLOY_RUNNING_LEASE_SECONDS = env.int(
    "DEPLOY_RUNNING_LEASE_SECONDS", default=CELERY_TASK_TIME_LIMIT + 60
)
# The trigger executors (docs/http-api.md, "Executors"). http: one Standard Webhooks message
# per job to DEPLOY_HTTP_URL, signed with DEPLOY_HTTP_SECRET (whsec_...); github: a GitHub
# deployment per job through GITHUB_API_URL with GITHUB_TOKEN. Deploy targets (admin) give
# their own URL and secret.
DEPLOY_HTTP_URL = env("DEPLOY_HTTP_URL", default="")
DEPLOY_HTTP_SECRET = env("DEPLOY_HTTP_SECRET", default="")
# The deadline of each trigger attempt as a whole (a github attempt's lookup and create
# together), "Send test trigger" too: lookup, connect (at most 5 s of it), sending, the
# answer's headers and body (docs/security.md, "Deploy targets").
DEPLOY_HTTP_TIMEOUT_SECONDS = env.float("DEPLOY_HTTP_TIMEOUT_SECONDS", default=10)
# Attempts that a retry may fix wait min(max, base * 2^(n-1)) at most (full jitter), or what
# the receiver's Retry-After says (up to the max); the last one fails the job.
DEPLOY_TRIGGER_RETRY_BASE_SECONDS = env.float(
    "DEPLOY_TRIGGER_RETRY_BASE_SECONDS", default=2
)
DEPLOY_TRIGGER_RETRY_MAX_SECONDS = env.float(
    "DEPLOY_TRIGGER_RETRY_MAX_SECONDS", default=600
)
DEPLOY_TRIGGER_MAX_ATTEMPTS = env.int("DEPLOY_TRIGGER_MAX_ATTEMPTS", default=8)
# Destinations a trigger never calls, whatever a target says, in any form of an address and
# on the address each connection is made to (docs/security.md, "Deploy targets"): link-local
# addresses (cloud metadata services among them) by default.
DEPLOY_TRIGGER_DENY_NETWORKS = env.list(
    "DEPLOY_TRIGGER_DENY_NETWORKS",
    default=["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "0.0.0.0/8", "::/128"],
)
# A deploy target's circuit breaker (docs/subsystems/executors.md, "A target's breaker"):
# this many of its attempts failing in a row (unreachable, timed out, 5xx), each within the
# window of the one before, open it (0: never); its jobs then wait, queued, and one probe
# goes after the cool-down. A job waiting for a half-open breaker or for a slot of a target's
# max_in_flight looks again this often (holding no worker meanwhile).
DEPLOY_TARGET_BREAKER_FAILURES = env.int("DEPLOY_TARGET_BREAKER_FAILURES", default=5)
DEPLOY_TARGET_BREAKER_WINDOW_SECONDS = env.float(
    "DEPLOY_TARGET_BREAKER_WINDOW_SECONDS", default=600
)
DEPLOY_TARGET_BREAKER_COOLDOWN_SECONDS = env.float(
    "DEPLOY_TARGET_BREAKER_COOLDOWN_SECONDS", default=60
)
DEPLOY_TARGET_WAIT_SECONDS = env.float("DEPLOY_TARGET_WAIT_SECONDS", default=5)
GITHUB_API_URL = env("GITHUB_API_URL", default="https://api.github.com")
GITHUB_TOKEN = env("GITHUB_TOKEN", default="")
# github-actions: the branch or tag a dispatched workflow runs on, for jobs that name none (a
# deployment; a build's own ref wins). The workflow checks out inputs.commit_sha.
GITHUB_ACTIONS_REF = env("GITHUB_ACTIONS_REF", default="main")
# Expired idempotency records are kept this long for audit, then purged.
IDEMPOTENCY_AUDIT_RETENTION_SECONDS = env.int(
    "IDEMPOTENCY_AUDIT_RETENTION_SECONDS", default=30 * 86400
)
IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS = env.float(
    "IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS", default=3600
)

# --- Inbox processing ----------------------------------------------------------------------
# How long a handler waits for a row lock of its domain (a research document's, a deployment's)
# before giving up with a transient error (retried with backoff): normal contention lasts
# milliseconds. Set once per batch by the inbox for every handler.
INBOX_LOCK_TIMEOUT_MS = env.int("INBOX_LOCK_TIMEOUT_MS", default=2000)
# PostgreSQL: the inbox and its attempts are partitioned by UTC day (or week) of the event's
# received time; the periodic work keeps partitions this many days ahead of today (docs/scaling.md,
# "Time partitions of the inbox"). At least 2: the alert fires below 2 days.
INBOX_PARTITIONS_AHEAD_DAYS = env.int("INBOX_PARTITIONS_AHEAD_DAYS", default=7)
if INBOX_PARTITIONS_AHEAD_DAYS < 2:
    raise ImproperlyConfigured(
        f"INBOX_PARTITIONS_AHEAD_DAYS must be at least 2, not {INBOX_PARTITIONS_AHEAD_DAYS}:"
        " a day's deliveries are refused when its partition is missing."
    )
# PostgreSQL: how many UTC days each partition of the inbox and its attempts spans: 1 (a
# day) or 7 (a week from Monday); a partition is what retention drops whole. Each partition
# adds to every statement that names no day (the relay's look for waiting rows, the admin's
# lists): a retention of a few weeks suits days, one of months or a year weeks
# (docs/scaling.md, "Days or weeks"). Applies to the partitions created from then on.
INBOX_PARTITION_DAYS = env.int("INBOX_PARTITION_DAYS", default=1)
if INBOX_PARTITION_DAYS not in (1, 7):
    raise ImproperlyConfigured(
        f"INBOX_PARTITION_DAYS must be 1 (a partition a day) or 7 (a week), not"
        f" {INBOX_PARTITION_DAYS}."
    )
# PostgreSQL: a day of the inbox (its events and their attempts) is dropped with its
# partitions once it ended this many days ago (docs/scaling.md, "Retention by dropping a
# partition"). Unset: every day is kept.
INBOX_RETENTION_DAYS = env.int("INBOX_RETENTION_DAYS", default=None)
if INBOX_RETENTION_DAYS is not None and INBOX_RETENTION_DAYS < 1:
    raise ImproperlyConfigured(
        f"INBOX_RETENTION_DAYS must be at least 1 day, or unset, not {INBOX_RETENTION_DAYS}."
    )
# The deduplication ledger's own horizon: a key (the slim row that answers a redelivery once
# its inbox row has left) is purged once its day ended this many days ago and its row, and
# every older one, has left the inbox; a later redelivery of its event is a new event
# (docs/subsystems/inbox.md, "The deduplication ledger"). 400: a year and a month, longer
# than producers retry or let an event be sent again by hand (days to weeks), and than a
# yearly re-send of a year's events. At least 1 and at least INBOX_RETENTION_DAYS; there is
# no "forever" (a ledger never trimmed grows by about 226 bytes an event for good).
INBOX_DEDUP_DAYS = inbox_dedup_days_check(
    env.int("INBOX_DEDUP_DAYS", default=400), retention_days=INBOX_RETENTION_DAYS
)
