"""PostgreSQL for the web processes: every wait for the database's answer is bounded
(docs/scaling.md, "Database timeouts").

A database that stops answering (a partition, a proxy or a router that holds the bytes) is
not seen by TCP from this side: the bytes sent are acknowledged, keepalives too, and libpq
waits for the answer for ever, until gunicorn kills the worker. Here each wait for the
server (a statement, its results, a commit) ends after ``answer_timeout`` seconds: the
connection is dropped and the wait raises ``OperationalError``, which the views answer 503
(``Retry-After``). The server's own ``statement_timeout`` is set a little lower, so that a
statement the database is merely slow to finish is ended by the server first, and the
connection stays usable.

Django's backend, subclassed as its documentation describes ("Subclassing the built-in
database backends"); the settings name it for web processes only (``config/settings/base.py``).
"""

from __future__ import annotations

import psycopg
from django.db.backends.postgresql import base as postgresql
from psycopg.errors import (
    _WaitTimeout,
)  # what psycopg's Connection.wait raises on timeout


class AnswerBoundConnection(psycopg.Connection):
    """A psycopg connection whose waits for the server end after ``answer_timeout`` seconds
    (None: no bound). Waits given their own timeout (``notifies``) keep it."""

    answer_timeout: float | None = None

    def wait(self, gen, *args, **kwargs):
        bound = self.answer_timeout
        if bound is None or kwargs.get("timeout") is not None or len(args) > 1:
            return super().wait(gen, *args, **kwargs)
        kwargs["timeout"] = bound
        try:
            return super().wait(gen, *args, **kwargs)
        except _WaitTimeout:
            # A statement in flight, in an unknown state: the connection is never used
            # again (Django sees it closed and opens another for the next request).
            self.pgconn.finish()
            raise psycopg.OperationalError(
                f"the database did not answer within {bound:g} s"
            ) from None


class _Psycopg:
    """``psycopg`` as Django's backend reaches it (``DatabaseWrapper.Database``): the module
    itself, except that ``connect`` makes an ``AnswerBoundConnection``."""

    connect = AnswerBoundConnection.connect

    def __getattr__(self, name):
        return getattr(psycopg, name)


class DatabaseWrapper(postgresql.DatabaseWrapper):
    Database = _Psycopg()

    def get_connection_params(self):
        params = super().get_connection_params()
        # The settings' bound, not a libpq parameter.
        self.answer_timeout = params.pop("answer_timeout", None)
        return params

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        connection.answer_timeout = self.answer_timeout
        return connection
