"""The verifiable log at 1,000,000 leaves (docs/bench-log/2026-12-01.md, "Verifiable log"):
appending in sealing batches, inclusion and consistency proofs, and recomputing the whole
tree from its leaves, each next to a floor measured in the same run on the same database.

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/wt_bench python -m bench.auditlog

- append: leaves/s per batch of ``AUDIT_SEAL_BATCH_SIZE`` (5000) leaves through
  ``audit.log.log_append`` (canonical JSON, hashing, the tree's nodes, the lock); floor: the
  same leaf rows, canonical JSON included, written by one ``COPY`` into a table of the same
  shape, with no hashing and no nodes.
- proofs: milliseconds per ``log_inclusion_proof`` / ``log_consistency_proof`` against the
  tree of 1,000,000 leaves, for random indexes and sizes (target: under 50 ms each); floor:
  one primary-key ``SELECT`` of one node row.
- recompute: seconds for ``log_root_recompute`` over the 1,000,000 leaves (every leaf hashed,
  every stored node compared); floor: reading the same leaf rows in the same chunks.

Then, on a fresh database, the ledgers themselves (``BENCH_AUDITLOG_LEDGER_ROWS``, 1,000,000
inbox rows with a small body each, written by SQL in transactions of 100,000):

- sealing: ledger rows logged per second by ``audit.sealer.ledger_rows_seal`` (the walk by
  ticket, the anti-join, the leaves built from the rows, the append); floor: the append alone
  (the first figure). And the row versions sealing wrote to the ledger tables (PostgreSQL's
  counters: none), next to what a marker column set by the sealer would have cost (the same
  rows updated once, in the sealer's batches: time and row versions).
- verify: seconds for ``audit.verification.log_verify`` over the whole log (every entry
  against its row and body, the tree recomputed, rows not logged, job statuses); floor:
  reading the leaf rows.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from datetime import timedelta

from bench.harness import (
    BenchContext,
    Figure,
    database_reset,
    django_setup,
    report,
)

LEAVES = int(os.environ.get("BENCH_AUDITLOG_LEAVES", "1000000"))
LEDGER_ROWS = int(os.environ.get("BENCH_AUDITLOG_LEDGER_ROWS", "1000000"))
# Rows updated to measure what a marker column would cost (in batches of BATCH).
MARKED_ROWS = int(os.environ.get("BENCH_AUDITLOG_MARKED_ROWS", "100000"))
BATCH = int(os.environ.get("BENCH_AUDITLOG_BATCH", "5000"))
PROOFS = int(os.environ.get("BENCH_AUDITLOG_PROOFS", "300"))
TARGET_PROOF_MS = 50.0


def _batch(start: int, count: int) -> list:
    """Leaves shaped like an inbox row's: hashes, ids, times, headers."""
    from audit.leaves import LeafInput

    return [
        LeafInput(
            kind="inbox_event",
            record_id=i,
            fields={
                "source_id": 1 + i % 3,
                "event_id": f"evt-{i}",
                "event_type": "research.document.updated",
                "entity_id": f"doc-{i % 50000}",
                "source_version": i,
                "payload_hash": f"{i:064x}",
                "content_fingerprint": f"{i * 7:064x}",
                "headers": {"content-type": "application/json"},
                "signature_valid": True,
                "received_at": "2026-11-30T12:00:00.000000+00:00",
            },
        )
        for i in range(start, start + count)
    ]


def _floor_insert(batches: int) -> float:
    """Leaves/s of the bare insert of the same rows (no hashing, no nodes)."""
    from django.db import connection, transaction

    from audit.leaves import leaf_encode

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_logleaf_floor")
        cursor.execute(
            "CREATE TABLE bench_logleaf_floor (index bigint PRIMARY KEY, "
            "kind varchar(40) NOT NULL, record_id bigint NOT NULL, leaf text NOT NULL, "
            "UNIQUE (kind, record_id))"
        )
    rates = []
    for b in range(batches):
        rows = _batch(b * BATCH, BATCH)
        started = time.perf_counter()
        texts = [leaf_encode(leaf) for leaf in rows]
        with (
            transaction.atomic(),
            connection.cursor() as cursor,
            cursor.copy("COPY bench_logleaf_floor FROM STDIN (FORMAT BINARY)") as copy,
        ):
            copy.set_types(["int8", "varchar", "int8", "text"])
            for leaf, text in zip(rows, texts, strict=True):
                copy.write_row((leaf.record_id, leaf.kind, leaf.record_id, text))
        rates.append(BATCH / (time.perf_counter() - started))
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE bench_logleaf_floor")
    return statistics.median(rates)


def _append_all() -> tuple[list[float], float]:
    from audit.log import log_append

    rates = []
    started_all = time.perf_counter()
    for start in range(0, LEAVES, BATCH):
        count = min(BATCH, LEAVES - start)
        leaves = _batch(start, count)
        started = time.perf_counter()
        log_append(leaves=leaves)
        rates.append(count / (time.perf_counter() - started))
        if start and start % 100_000 == 0:
            print(f"[auditlog] {start:,} leaves appended", flush=True)
    return rates, time.perf_counter() - started_all


def _timed_ms(call, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _floor_select_ms(samples: int) -> float:
    from django.db import connection

    rng = random.Random(1)
    with connection.cursor() as cursor:

        def one():
            cursor.execute(
                "SELECT hash FROM audit_lognode WHERE position = %s",
                [rng.randrange(LEAVES)],
            )
            cursor.fetchone()

        return statistics.median(_timed_ms(one, samples))


def _floor_read_seconds(chunk: int = 5000) -> float:
    from audit.models import LogLeaf

    started = time.perf_counter()
    position = 0
    while True:
        rows = list(
            LogLeaf.objects.filter(index__gte=position)
            .order_by("index")
            .values_list("index", "leaf")[:chunk]
        )
        if not rows:
            break
        position = rows[-1][0] + 1
    return time.perf_counter() - started


_LEDGER_TABLES = (
    "webhooks_inboxevent",
    "webhooks_inboxattempt",
    "webhooks_fingerprintmismatch",
    "webhooks_operatoraction",
    "research_documentrevision",
    "deployments_job",
    "deployments_jobtransition",
    "deployments_statussync",
)


def _ledger_rows_create(rows: int) -> None:
    """``rows`` processed inbox rows received a day ago, each with its small body and the
    payload hash of it, as SQL writes them fastest: one transaction per 100,000 rows."""
    from django.db import connection, transaction

    from webhooks.models import WebhookSecret, WebhookSource

    source = WebhookSource.objects.create(slug="bench", handler="research")
    secret = WebhookSecret.objects.create(
        source=source,
        secret="bench-secret-0123456789abcdef",  # noqa: S106 - a bench source
    )
    step = 100_000
    for start in range(0, rows, step):
        end = min(rows, start + step)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO webhooks_inboxevent (
                    source_id, event_id, event_type, entity_id, entity_type,
                    source_version, occurred_at, tenant_id, idempotency_key, payload_hash,
                    content_fingerprint, raw_body, headers, signature_valid,
                    secret_fingerprint, remote_addr, received_at, processing_status,
                    http_status, error_message, attempts, delivery_count, last_seen_at)
                SELECT %(source)s, 'evt-' || g, 'research.document.updated',
                       'doc-' || (g %% 50000), 'research_document', g,
                       now() - interval '1 day', '', '', encode(sha256(body), 'hex'),
                       md5(g::text) || md5((g + 1)::text), body,
                       '{"content-type": "application/json"}', true, %(fingerprint)s,
                       '127.0.0.1', now() - interval '1 day' + g * interval '1 ms',
                       'processed', 202, '', 1, 1, now()
                  FROM (SELECT g, convert_to(
                                   '{"event_id": "evt-' || g || '", "data": {"n": ' || g
                                   || ', "title": "A research document"}}', 'UTF8') AS body
                          FROM generate_series(%(start)s, %(end)s) AS g) AS rows
                """,
                {
                    "source": source.pk,
                    "fingerprint": secret.fingerprint,
                    "start": start + 1,
                    "end": end,
                },
            )
        print(f"[auditlog] {end:,} ledger rows written", flush=True)


def _row_versions() -> int:
    """Row versions the ledger tables' updates and deletes made, as PostgreSQL counts them."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        # A partitioned table's rows are counted under its partitions (the inbox's days).
        cursor.execute(
            "SELECT coalesce(sum(n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables"
            " WHERE relname = ANY(%s) OR relid IN (SELECT inhrelid FROM pg_inherits"
            " WHERE inhparent::regclass::text = ANY(%s))",
            [list(_LEDGER_TABLES), list(_LEDGER_TABLES)],
        )
        return int(cursor.fetchone()[0])


def _marking_floor(rows: int) -> tuple[float, int, int]:
    """What a marker column set by the sealer costs: ``rows`` inbox rows updated once, in
    batches of BATCH, each in its own transaction (the column is indexed, as a partial index
    of unmarked rows would make it). Returns (microseconds per row, row versions, of which
    HOT)."""
    from django.db import connection, transaction

    def counters() -> tuple[int, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
            # Over the inbox's partitions (its days), or the table where it is one.
            cursor.execute(
                "SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0)"
                " FROM pg_stat_user_tables WHERE relid IN"
                " (SELECT relid FROM pg_partition_tree('webhooks_inboxevent') WHERE isleaf)"
            )
            return tuple(int(v) for v in cursor.fetchone())

    before = counters()
    started = time.perf_counter()
    for start in range(0, rows, BATCH):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "UPDATE webhooks_inboxevent SET log_ticket = log_ticket"
                " WHERE id > %s AND id <= %s",
                [start, start + BATCH],
            )
    seconds = time.perf_counter() - started
    after = counters()
    return seconds / rows * 1e6, after[0] - before[0], after[1] - before[1]


def _ledgers(append_rate: float, read_seconds_per_leaf: float) -> list[Figure]:
    """The ledgers' part, on the fresh database Django is connected to."""
    from django.utils import timezone

    from audit.sealer import ledger_rows_seal
    from audit.verification import log_verify

    _ledger_rows_create(LEDGER_ROWS)
    versions = _row_versions()
    later = timezone.now() + timedelta(minutes=5)
    started = time.perf_counter()
    logged = 0
    while True:
        round_ = ledger_rows_seal(now=later, max_batches=50)
        logged += round_.leaves
        if not round_.leaves:
            break
        print(f"[auditlog] {logged:,} ledger rows logged", flush=True)
    seal_seconds = time.perf_counter() - started
    written = _row_versions() - versions
    marking_us, marking_versions, marking_hot = _marking_floor(
        min(MARKED_ROWS, LEDGER_ROWS)
    )
    started = time.perf_counter()
    verified = log_verify()
    verify_seconds = time.perf_counter() - started
    assert verified.ok, verified.problems[:5]
    entries = verified.entries_checked
    at = "at 1M entries" if entries >= 1_000_000 else f"at {entries // 1000:,}k entries"
    return [
        Figure(
            "auditlog",
            "sealing: ledger rows logged/s",
            logged / seal_seconds,
            "rows/s",
            floor_name="log_append alone",
            floor_value=append_rate,
            extra={
                "rows": logged,
                "seconds": seal_seconds,
                "row_versions_written_to_ledgers": written,
                "marker_column_floor_us_per_row": marking_us,
                "marker_column_row_versions_per_row": marking_versions
                / max(min(MARKED_ROWS, LEDGER_ROWS), 1),
                "marker_column_hot_updates": marking_hot,
            },
        ),
        Figure(
            "auditlog",
            "sealing: row versions per ledger row",
            written / max(logged, 1),
            "versions",
            floor_name="a marker column set by the sealer",
            floor_value=marking_versions / max(min(MARKED_ROWS, LEDGER_ROWS), 1),
            higher_is_better=False,
        ),
        Figure(
            "auditlog",
            f"audit_verify of the whole log {at}",
            verify_seconds,
            "s",
            floor_name="read the leaf rows",
            floor_value=read_seconds_per_leaf * entries,
            higher_is_better=False,
            extra={"entries_per_second": entries / verify_seconds},
        ),
    ]


def _engine(ctx: BenchContext) -> list[Figure]:
    django_setup()
    from audit import merkle
    from audit.log import (
        log_consistency_proof,
        log_inclusion_proof,
        log_root,
        log_root_recompute,
    )

    floor_rate = _floor_insert(batches=10)
    rates, append_seconds = _append_all()
    print(f"[auditlog] {LEAVES:,} leaves in {append_seconds:.1f}s", flush=True)
    size, root = log_root()
    assert size == LEAVES

    rng = random.Random(7)
    indexes = [rng.randrange(LEAVES) for _ in range(PROOFS)]
    leaf_hashes = {}
    from audit.models import LogLeaf

    for index, text in LogLeaf.objects.filter(index__in=indexes).values_list(
        "index", "leaf"
    ):
        leaf_hashes[index] = merkle.leaf_hash(text.encode())
    inclusion_ms = []
    for index in indexes:
        started = time.perf_counter()
        proof = log_inclusion_proof(index=index, size=LEAVES)
        inclusion_ms.append((time.perf_counter() - started) * 1000)
        merkle.inclusion_verify(
            index=index,
            size=LEAVES,
            leaf_hash=leaf_hashes[index],
            proof=proof,
            root=root,
        )
    consistency_ms = []
    for _ in range(PROOFS):
        size1 = rng.randrange(1, LEAVES)
        _, root1 = log_root(size=size1)
        started = time.perf_counter()
        proof = log_consistency_proof(size1=size1, size2=LEAVES)
        consistency_ms.append((time.perf_counter() - started) * 1000)
        merkle.consistency_verify(
            size1=size1, size2=LEAVES, root1=root1, root2=root, proof=proof
        )
    select_ms = _floor_select_ms(PROOFS)

    read_seconds = _floor_read_seconds()
    started = time.perf_counter()
    recomputed = log_root_recompute()
    recompute_seconds = time.perf_counter() - started
    assert recomputed.ok and recomputed.root == root

    at = f"at {LEAVES // 1000:,}k leaves" if LEAVES < 1_000_000 else "at 1M leaves"
    return [
        Figure(
            "auditlog",
            f"append leaves/s (batches of {BATCH})",
            statistics.median(rates),
            "leaves/s",
            floor_name="bare COPY of the leaf rows",
            floor_value=floor_rate,
            extra={
                "min": min(rates),
                "max": max(rates),
                "total_seconds": append_seconds,
                "leaves": LEAVES,
            },
        ),
        Figure(
            "auditlog",
            f"inclusion proof p50 {at}",
            statistics.median(inclusion_ms),
            "ms",
            floor_name="1-row PK SELECT",
            floor_value=select_ms,
            higher_is_better=False,
            extra={
                "p99_ms": statistics.quantiles(inclusion_ms, n=100)[98],
                "under_50_ms": max(inclusion_ms) < TARGET_PROOF_MS,
                "max_ms": max(inclusion_ms),
            },
        ),
        Figure(
            "auditlog",
            f"consistency proof p50 {at}",
            statistics.median(consistency_ms),
            "ms",
            floor_name="1-row PK SELECT",
            floor_value=select_ms,
            higher_is_better=False,
            extra={
                "p99_ms": statistics.quantiles(consistency_ms, n=100)[98],
                "under_50_ms": max(consistency_ms) < TARGET_PROOF_MS,
                "max_ms": max(consistency_ms),
            },
        ),
        Figure(
            "auditlog",
            f"recompute the root {at}",
            recompute_seconds,
            "s",
            floor_name="read the leaf rows",
            floor_value=read_seconds,
            higher_is_better=False,
            extra={"leaves_per_second": LEAVES / recompute_seconds},
        ),
    ]


def run(ctx: BenchContext) -> list[Figure]:
    """The log's engine, then the ledgers, each on a database of its own."""
    from django.db import connections

    figures = _engine(ctx)
    append_rate = figures[0].value
    read_per_leaf = figures[-1].floor_value / LEAVES
    connections.close_all()
    database_reset()
    return figures + _ledgers(append_rate, read_per_leaf)


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="auditlog")


if __name__ == "__main__":
    sys.exit(main())
