"""Rows a test starts from, made once per process through the product's own paths and copied
back for every later test that asks for them (docs/development.md, "How the tests are laid
out").

``rows_snapshot(name, build)`` runs ``build()`` the first time a process asks for ``name``,
on tables that are empty (a transactional test's flush emptied them, or the rolled-back
transaction of a ``django_db`` test left them so), and keeps what it wrote: the rows of every
table it filled, as PostgreSQL's binary ``COPY`` gives them, and a copy of what ``build``
returned. Every later call, on empty tables again, copies the same rows back in one round trip
per table, moves the tables' sequences past them (never back), and answers a copy of what
``build`` returned the first time: the same objects, with the same primary keys. Nothing else
``build`` may have done (a broker message, a file, a cache) is kept: a build for a snapshot
writes rows and nothing a test reads elsewhere. On a database other than PostgreSQL every call
runs ``build()``."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connection, transaction

T = TypeVar("T")


@dataclass
class _Snapshot:
    tables: list[tuple[str, bytes]]
    # (table, its sequence, its primary key column) for each table with a sequence.
    sequences: list[tuple[str, str, str]]
    made: Any


_SNAPSHOTS: dict[tuple[str, str], _Snapshot] = {}


def _row_counts() -> dict[str, int]:
    tables = connection.introspection.django_table_names(only_existing=True)
    quote = connection.ops.quote_name
    counts = ", ".join(
        f"(SELECT count(*) FROM {quote(table)})"  # noqa: S608
        for table in tables
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {counts}")
        return dict(zip(tables, cursor.fetchone(), strict=True))


def _sequences(tables: list[str]) -> list[tuple[str, str, str]]:
    found = []
    with connection.cursor() as cursor:
        for table in tables:
            for column in connection.introspection.get_sequences(cursor, table):
                found.append((table, column["name"], column["column"]))
    return found


def rows_snapshot(name: str, build: Callable[[], T]) -> T:
    """What ``build()`` returns, with the rows it writes: made by the first call of a process
    for ``name`` (and its database), copied back by every later one (see the module's
    docstring). The tables ``build`` fills must be empty at each call."""
    if connection.vendor != "postgresql":
        # The copy is PostgreSQL's COPY: elsewhere (the suite's SQLite runs) every call builds.
        return build()
    key = (name, connection.settings_dict["NAME"])
    snapshot = _SNAPSHOTS.get(key)
    if snapshot is None:
        before = _row_counts()
        made = build()
        filled = [
            table
            for table, count in _row_counts().items()
            if count and not before.get(table)
        ]
        tables = []
        connection.ensure_connection()
        with connection.connection.cursor() as cursor:
            for table in filled:
                with cursor.copy(
                    # A query, not the table: a partitioned table (the inbox's) has
                    # no rows of its own to copy.
                    f"COPY (SELECT * FROM {connection.ops.quote_name(table)})"  # noqa: S608
                    " TO STDOUT (FORMAT BINARY)"
                ) as out:
                    tables.append((table, b"".join(bytes(chunk) for chunk in out)))
        _SNAPSHOTS[key] = _Snapshot(
            tables=tables, sequences=_sequences(filled), made=copy.deepcopy(made)
        )
        return made
    quote = connection.ops.quote_name
    connection.ensure_connection()
    with transaction.atomic(), connection.connection.cursor() as cursor:
        for table, data in snapshot.tables:
            cursor.execute(f"SELECT 1 FROM {quote(table)} LIMIT 1")  # noqa: S608
            assert cursor.fetchone() is None, (
                f"{table} is not empty: {name} not restored"
            )
            with cursor.copy(f"COPY {quote(table)} FROM STDIN (FORMAT BINARY)") as into:
                into.write(data)
        if snapshot.sequences:
            # Past the rows copied in, never back: a sequence only ever grows in a run.
            moves = ", ".join(
                f"setval('{sequence}', GREATEST("  # noqa: S608
                f"(SELECT max({quote(column)}) FROM {quote(table)}),"
                f" (SELECT last_value FROM {quote(sequence)})))"
                for table, sequence, column in snapshot.sequences
            )
            cursor.execute(f"SELECT {moves}")
    return copy.deepcopy(snapshot.made)
