"""The functions the settings modules call: reading the environment, shaping a database's
options, checking a value that would otherwise fail later. ``base.py`` and the
environment-specific modules hold the settings themselves (docs/configuration.md).
"""

import ipaddress
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured

env = environ.Env()


def env_renamed(cast: str, name: str, *, former: str, default):
    """A variable renamed to say what it configures: ``name`` if set, else its former name
    (still read, documented as an alias in docs/configuration.md), else ``default``."""
    read = getattr(env, cast)
    if name not in env.ENVIRON and former in env.ENVIRON:
        return read(former, default=default)
    return read(name, default=default)


def database_binding_apply(database: dict) -> None:
    """On PostgreSQL, parameters bound by the server rather than quoted into the SQL text by
    the client, and statements prepared: psycopg prepares a statement a connection runs often
    (its fifth run), and PostgreSQL then parses and plans it once per connection instead of
    once per request (docs/bench-log/2026-12-01.md, "Where the accepted request's time
    goes"). Behind a PgBouncer older than 1.21 in transaction mode, turn it off with
    ``DATABASE_SERVER_SIDE_BINDING=false``. The test settings apply it too, so that the suite
    runs every query the way production sends it."""
    if database["ENGINE"] != "django.db.backends.postgresql":
        return
    if env.bool("DATABASE_SERVER_SIDE_BINDING", default=True):
        database.setdefault("OPTIONS", {}).update(
            {"server_side_binding": True, "prepare_threshold": 5}
        )


def _server_options_add(options: dict, text: str) -> None:
    """``text`` (``-c name=value`` settings) appended to the connection's startup options."""
    options["options"] = f"{options.get('options', '')} {text}".strip()


def database_timeouts_apply(database: dict, settings: Mapping[str, Any]) -> None:
    """The bounded waits of ``settings`` (base.py's ``DATABASE_*_SECONDS``,
    ``DATABASE_KEEPALIVES_*``, ``DATABASE_JIT_OFF``, ``DATABASE_PARALLEL_QUERY_OFF``,
    ``APP_PROCESS`` and ``WEB_STATEMENT_TIMEOUT_*``; see
    docs/scaling.md, "Database timeouts") on a PostgreSQL database's settings, after
    ``database_binding_apply``."""
    if database["ENGINE"] != "django.db.backends.postgresql":
        return
    options = database.setdefault("OPTIONS", {})
    idle = settings["DATABASE_KEEPALIVES_IDLE_SECONDS"]
    interval = settings["DATABASE_KEEPALIVES_INTERVAL_SECONDS"]
    count = settings["DATABASE_KEEPALIVES_COUNT"]
    user_timeout = (idle + interval * count) * 1000
    options.setdefault("connect_timeout", settings["DATABASE_CONNECT_TIMEOUT_SECONDS"])
    options.setdefault("keepalives", 1)
    options.setdefault("keepalives_idle", idle)
    options.setdefault("keepalives_interval", interval)
    options.setdefault("keepalives_count", count)
    options.setdefault("tcp_user_timeout", user_timeout)
    if settings["DATABASE_SERVER_KEEPALIVES"]:
        server = (
            f"-c tcp_keepalives_idle={idle} "
            f"-c tcp_keepalives_interval={interval} "
            f"-c tcp_keepalives_count={count} "
            f"-c tcp_user_timeout={user_timeout}"
        )
        _server_options_add(options, server)
    if settings["DATABASE_JIT_OFF"]:
        # A compile of seconds before a statement that runs in milliseconds: PostgreSQL
        # compiles whatever its estimate calls expensive, and a search of the partitioned
        # inbox for an older event is estimated so (docs/scaling.md, "Database timeouts").
        _server_options_add(options, "-c jit=off")
    if settings["DATABASE_PARALLEL_QUERY_OFF"]:
        # Likewise parallel workers: 10-15 ms to start two for a statement that reads ten
        # rows, which the same estimate asks for (docs/scaling.md, "Database timeouts").
        _server_options_add(options, "-c max_parallel_workers_per_gather=0")
    timeout = settings["WEB_STATEMENT_TIMEOUT_SECONDS"]
    if settings["APP_PROCESS"] != "web" or timeout <= 0:
        return
    database["ENGINE"] = "core.pgbackend"
    options["answer_timeout"] = timeout + settings["WEB_ANSWER_MARGIN_SECONDS"]
    if settings["WEB_STATEMENT_TIMEOUT_ON_SERVER"]:
        _server_options_add(options, f"-c statement_timeout={int(timeout * 1000)}")


def inbox_dedup_days_check(days: int, *, retention_days: int | None) -> int:
    """``INBOX_DEDUP_DAYS``, refused at start unless at least 1 day and, with retention set,
    at least ``INBOX_RETENTION_DAYS``: a key purged before its row leaves would make a
    redelivery of a stored event a new one (docs/subsystems/inbox.md, "The deduplication
    ledger")."""
    if days < 1:
        raise ImproperlyConfigured(
            f"INBOX_DEDUP_DAYS must be at least 1 day, not {days}: there is no unbounded"
            " ledger; a very long horizon (36500) keeps its keys for good."
        )
    if retention_days is not None and days < retention_days:
        raise ImproperlyConfigured(
            f"INBOX_DEDUP_DAYS ({days}) must be at least INBOX_RETENTION_DAYS"
            f" ({retention_days}): deduplication must outlast the rows it answers for."
        )
    return days


def two_factor_mode_check(mode: str) -> str:
    """``ADMIN_TWO_FACTOR``, refused at start unless one of its four modes."""
    if mode not in ("off", "offered", "superusers", "staff"):
        raise ImproperlyConfigured(
            f"ADMIN_TWO_FACTOR={mode!r}: expected off, offered, superusers or staff"
        )
    return mode


def audit_signing_configure(skey: str) -> tuple[str, str]:
    """``(AUDIT_SIGNING_KEY, AUDIT_LOG_ORIGIN)``: the key checked (a note signer key,
    ``manage.py audit_keygen NAME`` makes one), and the origin line of the checkpoints, which
    is the key's name: C2SP has a log sign its checkpoints under its origin. A set
    ``AUDIT_LOG_ORIGIN`` that is not the key's name (the key of another log) is refused."""
    from audit.note import NoteError, signer_parse

    try:
        signer = signer_parse(skey)
    except NoteError as exc:
        raise ImproperlyConfigured(f"AUDIT_SIGNING_KEY is not usable: {exc}") from None
    origin = env("AUDIT_LOG_ORIGIN", default=signer.name)
    if origin != signer.name:
        raise ImproperlyConfigured(
            f"AUDIT_LOG_ORIGIN is {origin!r} but AUDIT_SIGNING_KEY is named "
            f"{signer.name!r}: a log signs its checkpoints under its origin (make a key "
            "for this origin with manage.py audit_keygen ORIGIN)"
        )
    return skey, origin


def host_is_loopback(host: str) -> bool:
    """Whether an ``ALLOWED_HOSTS`` entry names this machine only."""
    name = host.strip("[]").lower()
    if name in {"localhost", ".localhost"} or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def otel_endpoint_check(value: str) -> str:
    """``OTEL_EXPORTER_OTLP_ENDPOINT``: empty (tracing off) or an http(s) URL with a host,
    the collector's OTLP/HTTP base (``http://collector:4318``). Anything else is refused at
    start rather than left to fail, silently, at the first export."""
    value = value.strip()
    if not value:
        return ""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(
            f"OTEL_EXPORTER_OTLP_ENDPOINT={value!r}: expected an http(s) URL of an OTLP/HTTP "
            "collector, such as http://collector:4318 (or unset: tracing off)"
        )
    return value


def otel_key_mode_check(value: str) -> str:
    """``OTEL_RECORD_IDEMPOTENCY_KEY``: ``hash`` (the default) or ``raw``."""
    if value not in ("hash", "raw"):
        raise ImproperlyConfigured(
            f"OTEL_RECORD_IDEMPOTENCY_KEY={value!r}: expected hash or raw"
        )
    return value


def otel_service_name_check(value: str) -> str:
    if not value.strip():
        raise ImproperlyConfigured("OTEL_SERVICE_NAME is empty: name the service")
    return value.strip()


OTEL_INSTRUMENTATIONS = ("django", "celery", "psycopg", "httpx")


def otel_disabled_instrumentations_check(names: list[str]) -> list[str]:
    """``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS``: of the instrumentations the product starts,
    those to leave out; a name it does not start is refused rather than ignored."""
    names = [name.strip() for name in names if name.strip()]
    unknown = sorted(set(names) - set(OTEL_INSTRUMENTATIONS))
    if unknown:
        raise ImproperlyConfigured(
            f"OTEL_PYTHON_DISABLED_INSTRUMENTATIONS names {unknown}: expected some of "
            f"{', '.join(OTEL_INSTRUMENTATIONS)}"
        )
    return names
