"""The lock that makes one relay the one that publishes (docs/subsystems/relay.md, "One relay
publishes at a time"): a PostgreSQL session advisory lock, held on a connection of the
relay's own, apart from Django's (which the relay's loop closes and opens again as its
``CONN_MAX_AGE`` says).

The lock lives as long as that connection: a relay whose process ends, ``kill -9``
included, loses it with its connection at once, and a relay standing by takes it at its next
try. Advisory locks belong to one database, so relays of other databases on the same server
never meet. Nothing decides correctness by this lock: relays that run at the same moment take
disjoint rows (``FOR UPDATE SKIP LOCKED``), as they always did; the lock only keeps them from
splitting the work, and the messages, between them.
"""

from __future__ import annotations

import contextlib
import logging
import time

import psycopg
from django.db import connection

logger = logging.getLogger(__name__)

# The advisory lock's key: any constant the product uses for nothing else.
ACTIVE_RELAY_LOCK_KEY = 0x72656C6179  # "relay"


class ActiveRelayLock:
    """Whether this relay holds the active relay's lock, tried and checked at most every
    ``check_seconds``: a relay that does not hold it tries to take it, one that holds it
    checks that its connection (and so the lock) is still there. A database restarted, or a
    connection dropped, ends the lock on the server: the relay that held it knows within
    ``check_seconds`` and stands by until it takes the lock again."""

    def __init__(self, *, check_seconds: float) -> None:
        self.check_seconds = check_seconds
        self._connection: psycopg.Connection | None = None
        self._held = False
        self._checked: float | None = None

    @property
    def held(self) -> bool:
        return self._held

    def hold(self) -> bool:
        """Whether the lock is this relay's now (tried or checked if that is due)."""
        now = time.monotonic()
        if self._checked is not None and now - self._checked < self.check_seconds:
            return self._held
        self._checked = now
        try:
            if self._connection is None:
                self._connection = _connect()
            if self._held:
                self._connection.execute("SELECT 1")
            else:
                row = self._connection.execute(
                    "SELECT pg_try_advisory_lock(%s)", [ACTIVE_RELAY_LOCK_KEY]
                ).fetchone()
                self._held = bool(row and row[0])
        except psycopg.Error as exc:
            if self._held:
                logger.warning(
                    "relay.active_lock_lost", extra={"error": type(exc).__name__}
                )
            self.release()
        return self._held

    def release(self) -> None:
        """Gives the lock up (closing its connection), so that a relay standing by takes it
        at its next try."""
        self._held = False
        if self._connection is not None:
            with contextlib.suppress(Exception):
                self._connection.close()
        self._connection = None


def _connect() -> psycopg.Connection:
    """A connection of its own to the database Django's default connection reaches, with the
    same parameters (keepalives and timeouts included), in autocommit."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**params, autocommit=True)


def active_relay_lock_supported() -> bool:
    """The lock exists on PostgreSQL; elsewhere (the embedded SQLite default, where one
    worker runs anyway) every relay publishes."""
    return connection.vendor == "postgresql"
