"""Database connections: in long-lived Celery worker processes, the first statement of a
request standing in for the connection's health check; and the one way a set statement of an
app's ``statements.py`` is run (arrays bound in binary where they can be, its own
transaction's lock timeout) beside the session's lock timeout for the ORM's statements."""

import contextlib
import functools
import re
from collections.abc import Iterator, Sequence
from typing import Any, cast

from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
)
from psycopg.errors import LockNotAvailable


def celery_signals_connect() -> None:
    """Gives each task a usable connection, as Django does for each request.

    Workers keep their connection between tasks (``CELERY_DB_REUSE_MAX``), and Celery's Django
    fixup only recycles it every so many tasks. After PostgreSQL restarts, that connection is
    dead: without this, every later task of the process fails with "the connection is lost".
    ``close_old_connections`` closes a connection that has seen an error and is no longer usable
    (and one past ``CONN_MAX_AGE``); it costs no query otherwise."""
    from celery import signals

    def _recycle(task=None, **kwargs):
        # Only in a worker: a task applied eagerly runs inside its caller's connection and
        # transaction (a request, a test), which are not the task's to close.
        if task is not None and not getattr(task.request, "is_eager", False):
            close_old_connections()

    signals.task_prerun.connect(_recycle, weak=False)
    signals.task_postrun.connect(_recycle, weak=False)


def _fetchone(wrapper: Any, sql: str, params: Sequence[Any]) -> tuple | None:
    with wrapper.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def fetchone_checking_connection(sql: str, params: Sequence[Any]) -> tuple | None:
    """Runs one statement in autocommit and returns its first row. As the request's first
    use of a connection kept from an earlier request, the statement is the connection's
    health check (docs/bench-log/2026-12-01.md, "The health check's round trip, and a retry of the
    same bytes"): instead of Django's ``SELECT 1`` before it (``CONN_HEALTH_CHECKS``, one
    more round trip on every request), a statement that fails on a connection found dead
    afterwards (the database restarted since) runs once more on a new connection, as it
    would have after the check.

    Only for a statement that may run twice: a read, or a write that another run of finds
    done (an upsert), since a connection may die after the database committed the first
    run and before its answer came back, which the producer's own retry would meet alike."""
    # The thread's connection itself, looked up once rather than through the ``connection``
    # proxy at each use (a lookup in the thread's connections every time); the health
    # check's flags, which Django's type stubs do not declare.
    wrapper = cast(Any, connections[DEFAULT_DB_ALIAS])
    if (
        wrapper.connection is None
        or not wrapper.health_check_enabled
        or wrapper.health_check_done
        or wrapper.in_atomic_block
    ):
        return _fetchone(wrapper, sql, params)
    wrapper.health_check_done = True
    try:
        return _fetchone(wrapper, sql, params)
    except (OperationalError, InterfaceError):
        if wrapper.is_usable():
            raise  # the database answered: the statement's own failure
        wrapper.close()
    return _fetchone(wrapper, sql, params)


# The condition, in a statement's WHERE, that sets the lock_timeout of the statement's own
# transaction to the bound ``%(lock_timeout)s``: an InitPlan, evaluated once before any row is
# locked, so that the statement needs none of its own to set and reset the session's.
LOCK_TIMEOUT_IN_STATEMENT = (
    "(SELECT set_config('lock_timeout', %(lock_timeout)s, true)) IS NOT NULL"
)
_ARRAY_PARAMETER = re.compile(r"%\((\w+)\)s::(\w+)\[\]")


def lock_timeout_value(milliseconds: float) -> str:
    """``lock_timeout``'s value for a wait of ``milliseconds``."""
    return f"{int(milliseconds)}ms"


class LockWaitExceeded(OperationalError):
    """A statement waited for a row lock longer than its ``lock_timeout``: an
    ``OperationalError`` still, for whatever retries those."""


@functools.cache
def _binary_form(sql: str) -> str:
    return _ARRAY_PARAMETER.sub(r"%(\1)b::\2[]", sql)


def binds_binary() -> bool:
    """Whether the server binds the parameters (``server_side_binding``, set by
    ``config.settings._helpers.database_binding_apply``): only then can an array go in
    binary."""
    options = connections[DEFAULT_DB_ALIAS].settings_dict.get("OPTIONS", {})
    return options.get("server_side_binding") is True


def set_statement_sql(sql: str) -> str:
    """``sql`` as it is sent: its array parameters (``%(name)s::type[]``) bound in binary where
    the server binds parameters. psycopg writes a text array element by element in Python,
    quoting and escaping each, about ten times the cost of the binary form
    (docs/bench-log/2026-12-01.md, "Processing and the relay"); a client-side cursor cannot
    bind a binary parameter and keeps the text form."""
    return _binary_form(sql) if binds_binary() else sql


def set_statement_execute(
    sql: str,
    params: dict[str, Any],
    *,
    lock_timeout_ms: float | None = None,
    planned_for_values: bool = False,
) -> list[tuple]:
    """Runs one set statement of an app's ``statements.py`` and returns its rows: its arrays
    bound in binary where they can be (``set_statement_sql``); with ``lock_timeout_ms``, the
    statement's own transaction gives up waiting for a row lock after that long (the
    statement holds ``LOCK_TIMEOUT_IN_STATEMENT``), raising ``LockWaitExceeded``; with
    ``planned_for_values``, never prepared (``values_planned``)."""
    if lock_timeout_ms is not None:
        params = {**params, "lock_timeout": lock_timeout_value(lock_timeout_ms)}
    planned = values_planned() if planned_for_values else contextlib.nullcontext()
    with lock_wait_bounded(), planned, connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(set_statement_sql(sql), params)
        return cursor.fetchall()


@contextlib.contextmanager
def _prepare_threshold(threshold: int | None) -> Iterator[None]:
    """psycopg's ``prepare_threshold`` of the default connection for the statements run
    inside (nothing on SQLite)."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    if wrapper.vendor != "postgresql":
        yield
        return
    wrapper.ensure_connection()
    raw = wrapper.connection
    kept = raw.prepare_threshold
    raw.prepare_threshold = threshold
    try:
        yield
    finally:
        raw.prepare_threshold = kept


def prepared_at_once() -> contextlib.AbstractContextManager[None]:
    """The statements run inside are prepared at their first run on the connection, not its
    fifth: for a statement without values, whose one plan is the one PostgreSQL would make
    each time, planned once per connection from then on (the console's, ``core.plans``)."""
    return _prepare_threshold(0)


def values_planned() -> contextlib.AbstractContextManager[None]:
    """The statements run inside are sent unnamed, never prepared: PostgreSQL plans each one
    for its values and for the tables' sizes at that moment. For a statement that finds a
    batch's rows by id in the day's time partition: prepared, PostgreSQL may keep a generic
    plan made while the day was still empty, which reads the day's waiting rows through
    another index for every batch once thousands wait (docs/scaling.md, "Plans made on an
    empty day"). Only the client's side changes (psycopg's ``prepare_threshold``), as for
    the console (``core.plans``)."""
    return _prepare_threshold(None)


@contextlib.contextmanager
def lock_wait_bounded() -> Iterator[None]:
    """``LockWaitExceeded`` for a statement inside that gave up waiting for a lock (its
    transaction's or its session's ``lock_timeout``), whatever wrote it: a set statement or
    the ORM."""
    try:
        yield
    except OperationalError as exc:
        if not isinstance(exc.__cause__, LockNotAvailable):
            raise
        raise LockWaitExceeded(str(exc)) from exc


class SessionLockTimeout:
    """The session's ``lock_timeout`` for the statements that do not set their own (the ORM's):
    set the first time one of them comes (``ensure``), reset once the work is over
    (``reset``). Work that needs none sends neither statement. PostgreSQL only: the embedded
    SQLite default has one writer at a time."""

    def __init__(self, milliseconds: float) -> None:
        self.value = lock_timeout_value(milliseconds)
        self.is_set = False

    def ensure(self) -> None:
        wrapper = connections[DEFAULT_DB_ALIAS]
        if self.is_set or wrapper.vendor != "postgresql":
            return
        with wrapper.cursor() as cursor:
            # set_config, not SET: a parameter bound by the server cannot stand in SET.
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [self.value])
        self.is_set = True

    def reset(self) -> None:
        if not self.is_set:
            return
        self.is_set = False
        with (
            contextlib.suppress(Exception),
            connections[DEFAULT_DB_ALIAS].cursor() as cursor,
        ):
            cursor.execute("RESET lock_timeout")
