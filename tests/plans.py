"""What a hand-written statement reads under the plan a connection keeps for it.

The product's connections prepare a statement they run often (psycopg's fifth run), and
PostgreSQL may then keep a generic plan, made without the values, for as long as the
connection lives or nothing invalidates it. A generic plan made while a table (or a day's
partition) was empty counts on it staying empty: a join may then walk the whole table on
every run once it has filled. ``generic_plan_rows_read`` makes that plan on purpose and
counts what it reads (docs/scaling.md, "Plans made on an empty day"); ``rows_read``
counts what a statement reads under the plan made for its values, as on a day's partition
that no analyze has visited yet.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from django.db import connection

_NAMED = re.compile(r"%\((\w+)\)[sb]")


def _numbered(statement: str, params: Sequence | Mapping) -> tuple[str, list]:
    """``statement`` with ``$n`` placeholders, and its values in their order."""
    if isinstance(params, Mapping):
        names: list[str] = []

        def number(match: re.Match) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        return _NAMED.sub(number, statement), [params[name] for name in names]
    counter = itertools.count(1)
    return re.sub("%s", lambda _: f"${next(counter)}", statement), list(params)


def generic_plan_rows_read(
    statement: str,
    first: Sequence | Mapping,
    then: Sequence | Mapping,
    *,
    fill: Callable[[], Any],
    table: str,
) -> int:
    """The rows of ``table`` (and of its partitions) that ``statement`` reads when run with
    ``then``, under the generic plan made at its run with ``first``, before ``fill()`` added
    rows: each row a scan returned or removed by its filter. Runs in the test's transaction
    and leaves the statement's effects in it: a rollback to a savepoint would have psycopg
    deallocate every prepared statement of the connection, this one with them."""
    body, _ = _numbered(statement, first)

    def execute(values: Sequence | Mapping, explain: str = "") -> list:
        _, ordered = _numbered(statement, values)
        arguments = psycopg.ClientCursor(connection.connection).mogrify(
            ", ".join(["%s"] * len(ordered)), ordered
        )
        with connection.cursor() as cursor:
            cursor.execute(f"{explain}EXECUTE generic_plan_read({arguments})")
            return cursor.fetchall() if cursor.description else []

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE generic_plan_read AS {body}")
    try:
        execute(first)  # the plan is made now, and kept
        fill()
        [(plan,)] = execute(then, "EXPLAIN (ANALYZE, FORMAT JSON) ")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE generic_plan_read")
            cursor.execute("SET LOCAL plan_cache_mode = auto")
    return _scanned(plan[0]["Plan"], table)


def rows_read(statement: str, params: Mapping, *, table: str) -> int:
    """The rows of ``table`` (and of its partitions) that ``statement`` reads run once with
    ``params`` under the plan made for those values, as the product's unprepared statements
    are (``core.db.values_planned``): each row a scan returned or removed by its filter. Runs
    in the test's transaction and leaves the statement's effects in it."""
    return _scanned(explained(statement, params), table)


def explained(statement: str, params, *, analyze: bool = True) -> dict:
    """The plan of ``statement`` with ``params`` (``EXPLAIN (FORMAT JSON)``'s top node), run
    in the test's transaction with ``ANALYZE`` (its actual rows and loops), or only planned
    without ``analyze``."""
    explain = "EXPLAIN (ANALYZE, FORMAT JSON) " if analyze else "EXPLAIN (FORMAT JSON) "
    with connection.cursor() as cursor:
        cursor.execute(explain + statement, params)
        [(plan,)] = cursor.fetchall()
    return plan[0]["Plan"]


def partitions_planned(statement: str, params, *tables: str) -> set[str]:
    """The partitions of ``tables`` (time partitions: ``<table>_p0``, ``<table>_pYYYYMMDD``)
    that the plan of ``statement`` with ``params`` reads, only planned."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (COSTS OFF) " + statement, params)
        plan = "\n".join(line for (line,) in cursor.fetchall())
    names = "|".join(re.escape(table) for table in tables)
    return set(re.findall(rf"(?:{names})_p(?:0|\d{{8}})\b", plan))


def _scanned(plan: dict, table: str) -> int:
    return sum(
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0))
        * node["Actual Loops"]
        for node in plan_nodes(plan, table)
        if "Scan" in node["Node Type"]
    )


def plan_nodes(plan: dict, table: str) -> list[dict]:
    """The nodes of an ``EXPLAIN (FORMAT JSON)`` plan that name ``table`` or one of its
    partitions, in the plan's order."""
    found = []

    def walk(node: dict) -> None:
        if (node.get("Relation Name") or "").startswith(table):
            found.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    return found
