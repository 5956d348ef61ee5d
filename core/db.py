"""Database connections: in long-lived Celery worker processes, the first statement of a
request standing in for the connection's health check, and a statement that sets its own
transaction's lock timeout."""

from collections.abc import Sequence
from typing import Any, cast

from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
)


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
# transaction to the bound ``%(lock_timeout)s`` (``lock_timeout_value``): an InitPlan,
# evaluated once before any row is locked, so that the statement needs none of its own to set
# and reset the session's.
LOCK_TIMEOUT_IN_STATEMENT = (
    "(SELECT set_config('lock_timeout', %(lock_timeout)s, true)) IS NOT NULL"
)


def lock_timeout_value(milliseconds: float) -> str:
    """``lock_timeout``'s value for a wait of ``milliseconds``."""
    return f"{int(milliseconds)}ms"
