"""The verifiable log at 1,000,000 leaves (docs/benchmarks.md, "Verifiable log"): appending
in sealing batches, inclusion and consistency proofs, and recomputing the whole tree from its
leaves, each next to a floor measured in the same run on the same database.

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
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

from bench.harness import (
    BENCH_DATABASE_URL,
    BenchContext,
    Figure,
    database_reset,
    report,
    stack_env,
)

LEAVES = int(os.environ.get("BENCH_AUDITLOG_LEAVES", "1000000"))
BATCH = int(os.environ.get("BENCH_AUDITLOG_BATCH", "5000"))
PROOFS = int(os.environ.get("BENCH_AUDITLOG_PROOFS", "300"))
TARGET_PROOF_MS = 50.0


def _django_setup() -> None:
    import django
    from django.conf import settings

    if settings.configured:
        return
    os.environ.update(
        {
            k: v
            for k, v in stack_env().items()
            if k.startswith(
                ("DJANGO", "DATABASE", "CELERY_BROKER_URL", "LOG_LEVEL", "AUDIT_")
            )
        }
    )
    os.environ["DATABASE_URL"] = BENCH_DATABASE_URL
    django.setup()


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


def run(ctx: BenchContext) -> list[Figure]:
    _django_setup()
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


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="auditlog")


if __name__ == "__main__":
    sys.exit(main())
