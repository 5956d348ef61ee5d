"""Processing throughput and latency.

- Throughput: a pre-filled inbox of BENCH_PROCESSING_EVENTS research events (20,000 by default:
  half of them documents' first versions, half their second), stamped dispatched and published
  as the relay publishes them (messages of up to INBOX_BATCH_SIZE ids, through
  ``core.relay.outbox.publish``), drained by one worker process, then by two; next to the floor
  measured the same way in the same run (a Celery task doing one UPDATE per message, one
  message per row), in BENCH_PROCESSING_ROUNDS rounds (2) compared by their medians. Rates
  are (n - 1) / (last done - first done), from the database's own timestamps, so worker
  start-up does not count.
- Latency: inbox row committed (as the ingest path commits it, with no message) -> the relay of
  a worker publishes it -> row processed, at a steady moderate rate with two worker processes;
  p50 and p99. The ingest endpoint is not part of this measurement, so the HTTP request and its
  202 are not included.

On a server whose autovacuum is off, the inbox and document tables are vacuumed before each
throughput measurement (and the output says so), as autovacuum would have by then.

Run alone with ``python -m bench.processing``; writes ``var/bench/processing.json``.
"""

from __future__ import annotations

import os
import sys
import time

from bench.harness import (
    BenchContext,
    CoreSampler,
    Figure,
    Process,
    broker_purge,
    database_reset,
    django_setup,
    median,
    percentile,
    report,
    sql,
    wait_for,
    workers_ready,
)
from bench.processing_floor import FLOOR_TABLE

EVENTS = int(os.environ.get("BENCH_PROCESSING_EVENTS", "20000"))
LATENCY_SECONDS = float(os.environ.get("BENCH_PROCESSING_LATENCY_SECONDS", "20"))
LATENCY_RATE = float(os.environ.get("BENCH_PROCESSING_LATENCY_RATE", "40"))  # events/s
# Worker process counts to measure, e.g. "1,2,4" for the scaling table of docs/scaling.md.
WORKER_COUNTS = [
    int(n) for n in os.environ.get("BENCH_PROCESSING_WORKERS", "1,2").split(",")
]
DRAIN_TIMEOUT = float(os.environ.get("BENCH_PROCESSING_TIMEOUT", "1800"))
# Rounds of every worker count, floor then inbox, compared by their medians: the machine's
# speed drifts, and the scaling target is a ratio of four drains.
ROUNDS = int(os.environ.get("BENCH_PROCESSING_ROUNDS", "2"))


def _workers(ctx: BenchContext, count: int, **env: str) -> list[Process]:
    """``count`` worker processes (one Celery worker each, pool of one, each with its
    relay), as production would scale them."""
    started = []
    for i in range(count):
        started.append(
            ctx.celery_worker(
                name=f"bench{i}-{time.monotonic_ns()}",
                include=("bench.processing_floor",),
                **env,
            )
        )
    return started


def _stop(ctx: BenchContext, workers: list[Process]) -> None:
    for worker in workers:
        ctx.stop(worker)


def _inbox_fill(n: int, *, tag: str) -> list[tuple[int, str]]:
    """``n`` rows stamped dispatched, as a relay's claim leaves them: the workers' relays
    leave them alone. Returns their ids and event ids."""
    from django.utils import timezone

    from tests.integrations.research.factories import research_event
    from tests.webhooks.factories import inbox_events_bulk_create, research_source

    source = research_source("bench-research")
    half = max(n // 2, 1)
    bodies = [
        research_event(
            entity_id=f"doc_{tag}_{i % half}",
            source_version=1 + i // half,
            event_type="research.document.created"
            if i < half
            else "research.document.updated",
        )
        for i in range(n)
    ]
    rows = inbox_events_bulk_create(bodies, source=source, dispatched_at=timezone.now())
    return [(row.pk, row.event_id) for row in rows]


def _publish_all(task, ids: list[int]) -> None:
    for pk in ids:
        task.apply_async((pk,))


def _publish_inbox(rows: list[tuple[int, str]]) -> None:
    """The rows' processing messages as the relay publishes them: up to INBOX_BATCH_SIZE
    ids each, a one-row message carrying its event id as correlation id."""
    from django.conf import settings

    from core.relay.outbox import Publication, publish
    from webhooks.dispatch import PROCESS_TASK

    size = max(settings.INBOX_BATCH_SIZE, 1)
    chunks = [rows[start : start + size] for start in range(0, len(rows), size)]
    publish(
        [
            Publication(
                task=PROCESS_TASK,
                args=[[pk for pk, _ in chunk]],
                correlation_id=chunk[0][1] if len(chunk) == 1 else "",
            )
            for chunk in chunks
        ]
    )


def _rate(first, last, n: int) -> float:
    seconds = (last - first).total_seconds()
    return (n - 1) / seconds if seconds > 0 else float("nan")


# The tables a drain leaves dead row versions in (docs/bench-log/2026-12-01.md, "Statements and row
# versions per event").
VACUUMED = (
    "webhooks_inboxevent",
    "webhooks_inboxattempt",
    "research_researchdocument",
    "research_citation",
)


def _vacuum_if_autovacuum_off() -> None:
    """On a server whose autovacuum is off, vacuums the tables an earlier drain left dead
    row versions in, as autovacuum would have by then (webhooks 0020 sets the inbox's
    thresholds), and says so: otherwise each measurement would walk the dead versions of the
    ones before it.

    Only the tables that changed since their last analyze, as autovacuum: an empty table
    vacuumed and analyzed is known to the planner as empty, and the plans made then (the
    foreign keys' checks, which a connection keeps until the table is analyzed again; a
    prepared statement's generic plan) scan it whole while the drain fills it, with no
    autovacuum to analyze it again.
    That cost the first drain half its rate (docs/bench-log/2026-12-01.md, "Processing and the
    relay")."""
    if sql("SHOW autovacuum")[0][0] == "on":
        return
    # A partitioned table (the inbox, its attempts) changed when one of its partitions did;
    # VACUUM of the table takes every partition. A plain table has no partition tree: it
    # is its own.
    changed = [
        name
        for (name,) in sql(
            "SELECT DISTINCT t.name FROM unnest(%s::text[]) AS t(name)"
            " JOIN pg_stat_user_tables s"
            "   ON s.relid IN (SELECT relid FROM pg_partition_tree(t.name) WHERE isleaf"
            "                  UNION SELECT t.name::regclass)"
            " WHERE s.n_dead_tup + s.n_mod_since_analyze > 0 ORDER BY t.name",
            [list(VACUUMED)],
        )
    ]
    print(
        "[processing] the server runs with autovacuum off: the tables that changed since "
        "their last analyze are vacuumed before each measurement, as autovacuum would: "
        + (", ".join(changed) or "none"),
        flush=True,
    )
    if changed:
        sql(f"VACUUM (ANALYZE) {', '.join(changed)}")


def _drain_inbox(
    ctx: BenchContext, workers: int, filled: list[tuple[int, str]]
) -> tuple[float, dict]:
    """The drain's rate, and how busy the cores were from its first row processed to its
    last (``CoreSampler``)."""
    from webhooks.models import TERMINAL_STATUSES, InboxEvent

    _vacuum_if_autovacuum_off()
    broker_purge()
    _publish_inbox(filled)
    # The relays' sweep must not add messages for rows that merely wait in the queue.
    started = _workers(
        ctx, workers, INBOX_REDISPATCH_AFTER_SECONDS=str(int(DRAIN_TIMEOUT) + 60)
    )
    ids = [pk for pk, _ in filled]
    rows = InboxEvent.objects.filter(pk__in=ids)
    # Polled through the ids' range, then checked once by the ids themselves: a statement
    # binding 20,000 ids, every 0.2 s, cost this process and the database about half a core
    # while the workers drained, on the cores they share (docs/bench-log/2026-12-01.md, "Processing
    # and the relay").
    span_rows = InboxEvent.objects.filter(pk__range=(min(ids), max(ids)))
    with CoreSampler() as cores:
        wait_for(
            lambda: (
                not span_rows.exclude(processing_status__in=TERMINAL_STATUSES).exists()
                and not rows.exclude(processing_status__in=TERMINAL_STATUSES).exists()
            ),
            timeout=DRAIN_TIMEOUT,
            what=f"{len(ids)} inbox events processed by {workers} worker(s)",
        )
    _stop(ctx, started)
    from django.db.models import Max, Min

    span = rows.aggregate(first=Min("processed_at"), last=Max("processed_at"))
    busy = cores.over(span["first"].timestamp(), span["last"].timestamp())
    return _rate(span["first"], span["last"], len(ids)), busy


def _drain_floor(ctx: BenchContext, workers: int, n: int) -> tuple[float, dict]:
    """As ``_drain_inbox``, for the floor's tasks."""
    from bench.processing_floor import floor_update_task

    sql(
        f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} "
        "(id bigint PRIMARY KEY, done_at timestamptz)"
    )
    sql(f"TRUNCATE {FLOOR_TABLE}")
    sql(
        f"INSERT INTO {FLOOR_TABLE} (id) SELECT generate_series(1, %s)",
        [n],
    )
    broker_purge()
    _publish_all(floor_update_task, list(range(1, n + 1)))
    started = _workers(ctx, workers)
    with CoreSampler() as cores:
        wait_for(
            lambda: (
                sql(f"SELECT count(*) FROM {FLOOR_TABLE} WHERE done_at IS NULL")[0][0]  # noqa: S608
                == 0
            ),
            timeout=DRAIN_TIMEOUT,
            what=f"{n} floor tasks",
        )
    _stop(ctx, started)
    first, last = sql(f"SELECT min(done_at), max(done_at) FROM {FLOOR_TABLE}")[0]  # noqa: S608
    return _rate(first, last, n), cores.over(first.timestamp(), last.timestamp())


def _cores_text(cores: dict) -> str:
    """How busy the machine's cores were over a drain, for the printed line: a drain of
    work that needs the CPU cannot scale past the cores its one-worker drain left idle."""
    if not cores:
        return "cores not read"
    text = f"cores {cores['cores_busy']:.0%} busy, steal {cores['steal']:.0%}"
    if cores.get("cpu_pressure") is not None:
        text += f", CPU pressure {cores['cpu_pressure']:.0%}"
    return text


def _latency(ctx: BenchContext) -> dict:
    """Steady load: one event every 1/LATENCY_RATE s, each committed with no message; the
    workers' relays publish them."""
    from django.db.models import Count

    from tests.integrations.research.factories import research_event
    from tests.webhooks.factories import InboxEventFactory
    from webhooks.models import TERMINAL_STATUSES, InboxEvent

    broker_purge()
    started = _workers(ctx, 2)
    workers_ready(started)
    count = int(LATENCY_SECONDS * LATENCY_RATE)
    ids = []
    t0 = time.monotonic()
    for i in range(count):
        delay = t0 + i / LATENCY_RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        event = InboxEventFactory(
            body=research_event(
                source_version=1, event_type="research.document.created"
            )
        )
        ids.append(event.pk)
    rows = InboxEvent.objects.filter(pk__in=ids)
    wait_for(
        lambda: not rows.exclude(processing_status__in=TERMINAL_STATUSES).exists(),
        timeout=120,
        what="latency events processed",
    )
    _stop(ctx, started)
    latencies_ms = [
        (processed - received).total_seconds() * 1000
        for received, processed in rows.values_list("received_at", "processed_at")
    ]
    statuses = dict(rows.values_list("processing_status").annotate(n=Count("id")))
    return {
        "p50_ms": percentile(latencies_ms, 50),
        "p99_ms": percentile(latencies_ms, 99),
        "events": count,
        "rate_per_s": LATENCY_RATE,
        "statuses": statuses,
    }


def run(ctx: BenchContext) -> list[Figure]:
    django_setup()
    figures: list[Figure] = []
    rounds: dict[int, list[dict]] = {n: [] for n in WORKER_COUNTS}
    for round_ in range(ROUNDS):
        for workers in WORKER_COUNTS:
            floor, floor_cores = _drain_floor(ctx, workers, EVENTS)
            filled = _inbox_fill(EVENTS, tag=f"w{workers}r{round_}")
            processing, cores = _drain_inbox(ctx, workers, filled)
            rounds[workers].append(
                {
                    "events_per_s": processing,
                    "cores": cores,
                    "floor_tasks_per_s": floor,
                    "floor_cores": floor_cores,
                }
            )
            print(
                f"[processing] round {round_}, {workers} worker(s): "
                f"{processing:,.1f} events/s ({_cores_text(cores)}), "
                f"floor {floor:,.1f} tasks/s ({_cores_text(floor_cores)})",
                flush=True,
            )
    results = {
        workers: (
            median([r["events_per_s"] for r in done]),
            median([r["floor_tasks_per_s"] for r in done]),
        )
        for workers, done in rounds.items()
    }
    for workers in WORKER_COUNTS:
        processing, floor = results[workers]
        print(
            f"[processing] {workers} worker(s), medians of {ROUNDS} rounds: "
            f"{processing:,.1f} events/s, floor {floor:,.1f} tasks/s",
            flush=True,
        )
        figures.append(
            Figure(
                "processing",
                f"events/s, {workers} worker process(es)",
                processing,
                "ev/s",
                floor_name=f"1-UPDATE task, {workers} worker(s)",
                floor_value=floor,
                # Each worker process at least three and a half times what it does with a
                # task of one UPDATE (docs/bench-log/2026-12-01.md, "Processing and the
                # relay").
                target_ratio=3.5,
                extra={
                    "events": EVENTS,
                    "workers": workers,
                    "rounds": rounds[workers],
                },
            )
        )
    for workers in WORKER_COUNTS:
        if workers == 1 or 1 not in results:
            continue
        figures.append(
            Figure(
                "processing",
                f"scaling: {workers} workers / 1 worker",
                results[workers][0],
                "ev/s",
                floor_name="1 worker",
                floor_value=results[1][0],
                # Scaling at least as the floor's own does on the same workers.
                target_ratio=results[workers][1] / results[1][1],
                extra={"floor_scaling": results[workers][1] / results[1][1]},
            )
        )
    latency = _latency(ctx)
    for name in ("p50_ms", "p99_ms"):
        figures.append(
            Figure(
                "processing",
                f"latency commit -> relay -> processed {name[:3]}",
                latency[name],
                "ms",
                higher_is_better=False,
                extra=latency,
            )
        )
    return figures


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="processing")


if __name__ == "__main__":
    sys.exit(main())
