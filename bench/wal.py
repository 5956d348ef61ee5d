"""What a stretch of work wrote to PostgreSQL's write-ahead log, by relation: the records
between two WAL positions read back with ``pg_waldump`` (PostgreSQL's own reader of its log),
each counted against the table it belongs to, its heap or one of its indexes (a partition's
index against the partition). The bench server is local: its WAL directory is read where
``SHOW data_directory`` says (a superuser's setting; the bench connects as one).

``WalRange`` marks a stretch (``start``, then ``stop``); ``breakdown`` reads it, ``report``
prints it per unit of work (per event, say). ``python -m bench.inprocess`` uses it for every
request it measures, and for the relay's claims and processing (docs/benchmarks.md, "What a
step writes to the log"). Where ``pg_waldump`` or the directory cannot be read, ``breakdown``
says so and returns nothing: the totals stand alone then.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bench.harness import BENCH_DATABASE_URL, sql

# One record of ``pg_waldump``'s output: its resource manager, its whole length (with any
# full-page images), what it did, and the relations of its block references.
_RECORD = re.compile(
    r"^rmgr: (?P<rmgr>\S+)\s+len \(rec/tot\):\s+(?P<record>\d+)/\s*(?P<total>\d+),.*?"
    r"desc: (?P<desc>\S+)(?P<rest>.*)$"
)
# A record's first block reference: the relation it is counted against.
_BLOCK = re.compile(r"blkref #\d+: rel \d+/(?P<database>\d+)/(?P<node>\d+)")


@dataclass
class WalRange:
    """A stretch of the log of the server of ``url`` (the bench database by default):
    ``start()`` before the work, ``stop()`` after it. The log is the server's, shared by its
    databases: what else runs on it meanwhile is in the stretch too (``breakdown`` names it)."""

    url: str = BENCH_DATABASE_URL
    first: str = ""
    last: str = ""

    def start(self) -> None:
        # Where the next record goes: every record of the work comes after it.
        self.first = str(sql("SELECT pg_current_wal_insert_lsn()", url=self.url)[0][0])

    def stop(self) -> None:
        # A record of its own in a commit that waits for its flush (whatever the server's or
        # the database's synchronous_commit): every record before it is then in the log's
        # files, where pg_waldump reads, not only in the server's buffers.
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = on")
            conn.execute("SELECT pg_logical_emit_message(true, 'bench.wal', 'stop')")
            self.last = str(
                conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
            )

    @property
    def written(self) -> int:
        """Bytes of log written over the stretch."""
        lsns = [self.last, self.first]
        return int(sql("SELECT %s::pg_lsn - %s::pg_lsn", lsns, url=self.url)[0][0])


@dataclass
class Relation:
    """What one table's heap or one of its indexes took of the stretch."""

    records: int = 0
    written: int = 0  # bytes, full-page images included
    image_bytes: int = 0  # what full-page images took of ``written``
    kinds: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def _waldump(url: str) -> str | None:
    found = shutil.which("pg_waldump")
    if found:
        return found
    version = str(sql("SHOW server_version_num", url=url)[0][0])[:-4]
    candidate = Path(f"/usr/lib/postgresql/{version}/bin/pg_waldump")
    return str(candidate) if candidate.exists() else None


def _names(nodes: set[int], url: str) -> dict[int, tuple[str, str]]:
    """Per file node of the database of ``url``: (the table it belongs to, ``heap`` or the
    index's name)."""
    if not nodes:
        return {}
    rows = sql(
        """
        SELECT c.relfilenode, coalesce(t.relname, c.relname),
               CASE WHEN c.relkind = 'i' THEN c.relname ELSE 'heap' END
        FROM pg_class c
        LEFT JOIN pg_index i ON i.indexrelid = c.oid
        LEFT JOIN pg_class t ON t.oid = i.indrelid
        WHERE c.relfilenode = ANY(%s)
        """,
        [sorted(nodes)],
        url=url,
    )
    return {node: (table, part) for node, table, part in rows}


def breakdown(span: WalRange) -> dict[tuple[str, str], Relation] | None:
    """The records of ``span`` by (table, heap or index). ``None`` when the log cannot be
    read here. Records of no relation (commits) are counted under ``("(no relation)",
    kind)``, another database's under ``("(another database)", kind)``, a file this
    database no longer has (a table dropped since) under ``("(unknown relation)", file
    node)``."""
    waldump = _waldump(span.url)
    if waldump is None:
        print("WAL by relation: pg_waldump not found")
        return None
    directory = Path(str(sql("SHOW data_directory", url=span.url)[0][0])) / "pg_wal"
    done = subprocess.run(
        [waldump, "-p", str(directory), "-s", span.first, "-e", span.last],
        capture_output=True,
        text=True,
        check=False,
    )
    if not done.stdout:
        print(f"WAL by relation: pg_waldump read nothing ({done.stderr.strip()[:200]})")
        return None
    database = int(
        sql(
            "SELECT oid FROM pg_database WHERE datname = current_database()",
            url=span.url,
        )[0][0]
    )
    records = []
    for line in done.stdout.splitlines():
        record = _RECORD.match(line)
        if record is None:
            continue
        kind = f"{record['rmgr']}/{record['desc'].rstrip(',')}"
        block = _BLOCK.search(record["rest"])
        if block is None:
            key: tuple[str, str] | int = ("(no relation)", kind)
        elif int(block["database"]) == database:
            key = int(block["node"])  # named below, once every file is known
        else:
            key = ("(another database)", kind)
        records.append((key, kind, int(record["total"]), int(record["record"])))
    names = _names({key for key, *_ in records if isinstance(key, int)}, span.url)
    result: dict[tuple[str, str], Relation] = defaultdict(Relation)
    for key, kind, total, without_images in records:
        if isinstance(key, int):
            key = names.get(key, ("(unknown relation)", str(key)))
        relation = result[key]
        relation.records += 1
        relation.written += total
        relation.image_bytes += total - without_images
        relation.kinds[kind] += 1
    return dict(result)


def report(label: str, relations: dict[tuple[str, str], Relation], units: int) -> None:
    """Prints ``relations`` per unit: per table, then per heap and index, the bytes written
    without full-page images (what every change writes, whenever it comes) and with them
    (the first change of a page after a checkpoint copies the page), and the records of each
    kind; largest first."""
    units = max(units, 1)
    tables: dict[str, list[tuple[str, Relation]]] = defaultdict(list)
    for (table, part), relation in relations.items():
        tables[table].append((part, relation))

    def bytes_of(parts: list[tuple[str, Relation]]) -> str:
        written = sum(r.written for _, r in parts)
        images = sum(r.image_bytes for _, r in parts)
        text = f"{(written - images) / units:,.0f} bytes"
        return text + (f" ({written / units:,.0f} with page images)" if images else "")

    everything = [(part, r) for parts in tables.values() for part, r in parts]
    print(f"{label}: WAL per unit ({units:,} units), {bytes_of(everything)} in all")
    for table, parts in sorted(
        tables.items(), key=lambda t: -sum(r.written - r.image_bytes for _, r in t[1])
    ):
        print(f"  {table}: {bytes_of(parts)}")
        for part, relation in sorted(
            parts, key=lambda p: -(p[1].written - p[1].image_bytes)
        ):
            kinds = ", ".join(
                f"{kind} {n / units:.2f}" for kind, n in sorted(relation.kinds.items())
            )
            print(f"    {part}: {bytes_of([(part, relation)])}; {kinds}")
