"""End to end: ingest and processing together on the same machine (gunicorn, the workers with
their relays, PostgreSQL and the load generator share the cores), at a fixed offered rate.

How a rate is found, held and judged (the ingest-only floor measured around each 300 s run,
the probes, the confirmations, what "holds" means, the queue lag, latency at half the rate, and
why the run vacuums where autovacuum is off) is docs/benchmarks.md, "End to end: how a rate is
held". The knobs are ``BENCH_E2E_SECONDS``, ``BENCH_E2E_PROBE_SECONDS``,
``BENCH_E2E_LATENCY_SECONDS``, ``CONFIRMATIONS``, ``LAG_LIMIT_SECONDS``, ``WRITTEN_TABLES``
and the autovacuum stand-in's rules (``_autovacuum_due``).

Run alone: ``python -m bench.endtoend``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Callable

import psycopg

from bench.harness import (
    BENCH_DATABASE_URL,
    BENCH_SECONDS,
    BENCH_WEB_WORKERS,
    BenchContext,
    Figure,
    LoadResult,
    autovacuum_off,
    broker_purge,
    database_reset,
    load_run,
    manage,
    median,
    percentile,
    report,
    sql,
    wait_for,
    wait_until,
    workers_ready,
)
from bench.ingest import SECRET, SLUG, signed_events
from tests.processes import Process

SECONDS = float(os.environ.get("BENCH_E2E_SECONDS", "300"))
PROBE_SECONDS = float(os.environ.get("BENCH_E2E_PROBE_SECONDS", "30"))
LATENCY_SECONDS = float(os.environ.get("BENCH_E2E_LATENCY_SECONDS", "60"))
WORKERS = int(os.environ.get("BENCH_E2E_WORKERS", "2"))
# Enough connections that a request waits for its slot, not for a free connection.
CONNECTIONS = int(os.environ.get("BENCH_E2E_CONNECTIONS", "32"))
LAG_LIMIT_SECONDS = 5.0
# A bound, not a plan: the probes go up until a rate does not hold. Six had stopped below
# it when the first ingest-only floor was read low (443 req/s against 1,153 right before
# the 300 s run, 2026-12-06), all six holding.
MAX_PROBES = 16
# Long runs at a rate the short probes held: each one that does not hold is followed by one
# at a lower rate (``_find_rate``).
CONFIRMATIONS = 3
STEP = 1.15
# Rates within this factor of each other are one rate: 1% is finer than any probe's step.
SAME_RATE = 1.01
REFINEMENTS = 2
TARGET_RATIO = 0.7
TERMINAL_OK = ("processed", "ignored_out_of_order", "ignored_duplicate_version")


# The tables a run writes: the inbox, its ledger and its attempts (three dead versions of an
# event's row, one of its attempt's), and what the research handler writes (documents, their
# revisions and citations). Autovacuum would vacuum and analyze each of them as they change.
WRITTEN_TABLES = (
    "webhooks_inboxevent",
    "webhooks_inboxkey",
    "webhooks_inboxattempt",
    "research_researchdocument",
    "research_documentrevision",
    "research_citation",
)
_VACUUM_SQL = f"VACUUM (ANALYZE) {', '.join(WRITTEN_TABLES)}"
# Held by the stand-in's vacuum while it runs, and by a floor's measurement for all of its
# duration: no vacuum loads the machine while the ingest-only floor is read.
_VACUUM_LOCK = threading.Lock()


# Autovacuum's settings (PostgreSQL's "The Autovacuum Daemon"), each of which a table may set
# for itself (the inbox's partitions do, webhooks.0020 and 0021).
_AUTOVACUUM_SETTINGS = (
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_analyze_threshold",
    "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_delay",
)
# The tables a run writes, each partition apart (``pg_partition_tree`` lists none of a table
# that is not partitioned: that one is its own), with what autovacuum reads of them.
_AUTOVACUUM_TABLES_SQL = """
SELECT c.oid::regclass::text, greatest(c.reltuples, 0), s.n_dead_tup, s.n_ins_since_vacuum,
    s.n_mod_since_analyze, coalesce(c.reloptions, '{}')
FROM unnest(%s::regclass[]) AS written(relid),
    LATERAL (
        SELECT tree.relid FROM pg_partition_tree(written.relid) AS tree WHERE tree.isleaf
        UNION ALL
        SELECT oid FROM pg_class WHERE oid = written.relid AND relkind = 'r'
    ) AS leaf
JOIN pg_class AS c ON c.oid = leaf.relid
JOIN pg_stat_user_tables AS s ON s.relid = c.oid
"""


def _autovacuum_due(connection) -> list[tuple[str, float]]:
    """The statements autovacuum would run now on the tables a run writes, by its own rules,
    each with the pause (ms) autovacuum's cost-based delay would make in it: a table (each
    partition apart; a partitioned table itself it never analyzes) is vacuumed once its dead
    row versions pass ``threshold + scale_factor x rows``, or the rows inserted since its last
    vacuum pass the insert threshold so computed, and analyzed once the rows changed since its
    last analyze pass the analyze threshold; the server's settings, unless the table sets its
    own, and none for a table it is turned off for."""
    server = {
        name: float(setting)
        for name, setting in connection.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
            [list(_AUTOVACUUM_SETTINGS)],
        )
    }
    due = []
    rows = connection.execute(_AUTOVACUUM_TABLES_SQL, [list(WRITTEN_TABLES)]).fetchall()
    for name, reltuples, dead, inserted, changed, options in rows:
        own = dict(option.split("=", 1) for option in options)
        if own.get("autovacuum_enabled", "true").lower() in ("false", "off", "0"):
            continue
        setting = {key: float(own.get(key, value)) for key, value in server.items()}

        def past(count, base: str, share: str, rows=reltuples, setting=setting) -> bool:
            return count > setting[base] + setting[share] * rows

        vacuum = past(
            dead, "autovacuum_vacuum_threshold", "autovacuum_vacuum_scale_factor"
        ) or (
            setting["autovacuum_vacuum_insert_threshold"] >= 0
            and past(
                inserted,
                "autovacuum_vacuum_insert_threshold",
                "autovacuum_vacuum_insert_scale_factor",
            )
        )
        analyze = past(
            changed, "autovacuum_analyze_threshold", "autovacuum_analyze_scale_factor"
        )
        if vacuum or analyze:
            what = (
                "VACUUM (ANALYZE)"
                if vacuum and analyze
                else "VACUUM"
                if vacuum
                else "ANALYZE"
            )
            due.append((f"{what} {name}", setting["autovacuum_vacuum_cost_delay"]))
    return due


@contextlib.contextmanager
def _autovacuum_stand_in():
    """Yields whether the server's autovacuum is off and, if it is, a list of what a thread
    meanwhile ran in its place: every ``autovacuum_naptime`` (the server's setting), what
    autovacuum would run then on the tables the run writes (``_autovacuum_due``), throttled
    by autovacuum's cost-based delay and limit. A fixed ``VACUUM (ANALYZE)`` of all of them
    every 20 s, unthrottled, which stood here, did more than autovacuum does: about 1.3 s of
    a backend's CPU each time on the inbox of a run's end, most of it analyzing the
    partitioned tables themselves, which autovacuum never analyzes
    (docs/bench-log/2026-12-07.md, "The bench's autovacuum as autovacuum decides")."""
    if not autovacuum_off():
        yield None
        return
    naptime = float(
        sql("SELECT setting FROM pg_settings WHERE name = 'autovacuum_naptime'")[0][0]
    )
    print(
        f"[endtoend] the server runs with autovacuum off: the tables the run writes "
        f"({', '.join(WRITTEN_TABLES)}) are vacuumed and analyzed as autovacuum would, "
        f"looked at every {naptime:g} s (autovacuum_naptime)",
        flush=True,
    )
    stop = threading.Event()
    done: list[str] = []

    def vacuum() -> None:
        with psycopg.connect(BENCH_DATABASE_URL, autocommit=True) as connection:
            # Autovacuum's cost limit (-1: the one a manual VACUUM has).
            limit = connection.execute(
                "SELECT CASE WHEN current_setting('autovacuum_vacuum_cost_limit') = '-1' "
                "THEN current_setting('vacuum_cost_limit') "
                "ELSE current_setting('autovacuum_vacuum_cost_limit') END"
            ).fetchone()[0]
            connection.execute(
                "SELECT set_config('vacuum_cost_limit', %s, false)", [limit]
            )
            manual_delay = connection.execute("SHOW vacuum_cost_delay").fetchone()[0]
            while not stop.wait(naptime):
                with _VACUUM_LOCK:
                    for statement, delay in _autovacuum_due(connection):
                        # -1: autovacuum's delay is the one a manual VACUUM has.
                        connection.execute(
                            "SELECT set_config('vacuum_cost_delay', %s, false)",
                            [f"{delay:g}ms" if delay >= 0 else manual_delay],
                        )
                        connection.execute(statement)
                        done.append(statement)

    thread = threading.Thread(target=vacuum, name="vacuum", daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(timeout=60)


class _Numbers:
    """Event numbers handed out once across the whole run: every request is a new event."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, count: int) -> range:
        numbers = range(self.next, self.next + count)
        self.next += count
        return numbers


def _max_id() -> int:
    return sql("SELECT coalesce(max(id), 0) FROM webhooks_inboxevent")[0][0]


def _wait_settled(after_id: int, timeout: float = 30) -> None:
    """Waits until the rows of the run stop growing. When wrk stops, requests it sent may
    still wait in the server's backlog: the server answers them to closed connections, and
    their rows commit after the load is over. Their events belong to the run, and reading
    its rows before they come would count them as not processed."""
    seen = [-1]

    def settled() -> bool:
        count = sql(
            "SELECT count(*) FROM webhooks_inboxevent WHERE id > %s", [after_id]
        )[0][0]
        same = count == seen[0]
        seen[0] = count
        return same

    wait_until(
        settled, timeout=timeout, interval=0.5, what="the run's last requests committed"
    )


def _wait_drained(after_id: int, timeout: float = 180) -> None:
    _wait_settled(after_id)
    wait_for(
        lambda: (
            sql(
                "SELECT count(*) FROM webhooks_inboxevent WHERE id > %s "
                "AND processing_status IN ('received', 'processing', 'failed')",
                [after_id],
            )[0][0]
            == 0
        ),
        timeout=timeout,
        what="the end-to-end events processed",
    )


def _events_per_message(after_id: int) -> float:
    """The events of the run's rows over the messages that processed them: a message's
    events share their attempts' start (a set's read, or a batch claim); an event run alone
    counts as a message of its own."""
    events, messages = sql(
        "SELECT count(*), count(DISTINCT a.started_at) FROM webhooks_inboxevent e "
        "JOIN webhooks_inboxattempt a ON a.event_id = e.id WHERE e.id > %s",
        [after_id],
    )[0]
    return events / max(messages, 1)


def _run_at(base: str, numbers: _Numbers, *, rate: float, seconds: float) -> dict:
    """``seconds`` of signed new events offered at ``rate`` per second; the run's verdict and
    its figures."""
    after_id = _max_id()
    count = int(rate * seconds * 1.1) + 1000
    requests_ = signed_events(numbers.take(count))
    load = load_run(
        f"{base}/webhooks/{SLUG}/",
        requests_=requests_,
        seconds=seconds,
        connections=CONNECTIONS,
        rate=rate,
    )
    try:
        _wait_drained(after_id, timeout=max(60.0, seconds))
        drained = True
    except AssertionError:
        drained = False
    rows = sql(
        "SELECT processing_status, extract(epoch FROM processed_at - received_at) "
        "FROM webhooks_inboxevent WHERE id > %s",
        [after_id],
    )
    waits = [float(w) for status, w in rows if status in TERMINAL_OK and w is not None]
    not_ok = sum(1 for status, _ in rows if status not in TERMINAL_OK)
    max_lag = max(waits, default=float("inf")) if drained else float("inf")
    failures = sum(v for k, v in load.statuses.items() if k != "202")
    achieved = load.rps
    reasons = []
    if failures or load.socket_errors:
        reasons.append(f"answers {load.statuses}, socket errors {load.socket_errors}")
    if load.wrapped:
        reasons.append("the request list wrapped")
    if achieved < 0.97 * rate:
        reasons.append(f"achieved {achieved:.0f}/s of {rate:.0f}/s offered")
    if not drained or not_ok:
        reasons.append(f"{not_ok} events not processed")
    if max_lag >= LAG_LIMIT_SECONDS:
        reasons.append(f"queue lag reached {max_lag:.1f} s")
    result = {
        "rate": rate,
        "seconds": seconds,
        "achieved_rps": achieved,
        "requests": load.requests,
        "statuses": load.statuses,
        "socket_errors": load.socket_errors,
        "events": len(rows),
        "max_queue_lag_s": max_lag,
        "p50_ms": percentile(waits, 50) * 1000,
        "p99_ms": percentile(waits, 99) * 1000,
        "events_per_message": _events_per_message(after_id),
        "holds": not reasons,
        "why_not": "; ".join(reasons),
    }
    verdict = "holds" if result["holds"] else f"does not hold ({result['why_not']})"
    print(
        f"[endtoend] {rate:,.0f}/s for {seconds:g} s: {verdict}; "
        f"max lag {max_lag:.2f} s, p50 {result['p50_ms']:.0f} ms, "
        f"p99 {result['p99_ms']:.0f} ms, {result['events_per_message']:.1f} events a "
        "message",
        flush=True,
    )
    return result


def _ingest_only(base: str, numbers: _Numbers) -> tuple[float, list[LoadResult]]:
    runs = []
    for _ in range(2):
        count = int(3000 * BENCH_SECONDS) + 2000
        result = load_run(
            f"{base}/webhooks/{SLUG}/",
            requests_=signed_events(numbers.take(count)),
            seconds=BENCH_SECONDS,
        )
        if set(result.statuses) != {"202"} or result.wrapped:
            raise RuntimeError(
                f"ingest-only run: {result.statuses}, wrapped {result.wrapped}"
            )
        runs.append(result)
    return median([r.rps for r in runs]), runs


def _ingest_only_rows_set_aside(after_id: int) -> None:
    """The ingest-only rows are not part of what the workers are measured on: once the last
    of them committed, they are marked processed, as if a worker had been there."""
    _wait_settled(after_id)
    sql(
        "UPDATE webhooks_inboxevent SET processing_status = 'processed', "
        "processed_at = now(), dispatched_at = now() "
        "WHERE id > %s AND processing_status = 'received'",
        [after_id],
    )


def _find_rate(
    base: str,
    numbers: _Numbers,
    ingest_rps: float,
    floor: Callable[[], float],
):
    """The probes, the 300 s confirmation and the latency run (see the module's docstring).
    ``floor`` measures the ingest-only rate again, with the workers stopped meanwhile."""
    probes = []
    rate = TARGET_RATIO * ingest_rps
    best = None
    for _ in range(MAX_PROBES):
        probe = _run_at(base, numbers, rate=rate, seconds=PROBE_SECONDS)
        probes.append(probe)
        if probe["holds"]:
            best = rate if best is None else max(best, rate)
            # The next step up already failed (``SAME_RATE``: a rate reached again by
            # multiplying back is the same rate, whatever its last bits say).
            if any(
                not p["holds"] and p["rate"] <= rate * STEP * SAME_RATE for p in probes
            ):
                break
            rate *= STEP
        else:
            if best is not None:
                break
            rate /= STEP
    # A 15% step leaves the rate that holds up to 15% below the one that does not: halve the
    # gap between them REFINEMENTS times.
    for _ in range(REFINEMENTS):
        if best is None:
            break
        failed = [
            p["rate"] for p in probes if not p["holds"] and p["rate"] > best * SAME_RATE
        ]
        if not failed:
            break
        rate = (best * min(failed)) ** 0.5
        probe = _run_at(base, numbers, rate=rate, seconds=PROBE_SECONDS)
        probes.append(probe)
        if probe["holds"]:
            best = rate

    sustained = None
    confirmations = []
    if best is not None:
        rate = best
        for _ in range(CONFIRMATIONS):
            before = floor()
            confirmation = _run_at(base, numbers, rate=rate, seconds=SECONDS)
            after = floor()
            confirmation["ingest_only_before_after"] = [before, after]
            confirmation["ingest_only"] = (before + after) / 2
            print(
                f"[endtoend] ingest only around that run: {before:,.0f} and "
                f"{after:,.0f} req/s",
                flush=True,
            )
            confirmations.append(confirmation)
            if confirmation["holds"]:
                sustained = confirmation
                break
            # 10% less, or less again when the run's own answered rate says the web stood
            # lower than that over the whole run.
            rate = min(rate * 0.9, confirmation["achieved_rps"] * 0.97)

    latency = None
    if sustained is not None:
        latency = _run_at(
            base, numbers, rate=sustained["rate"] / 2, seconds=LATENCY_SECONDS
        )

    return probes, confirmations, sustained, latency


def stack_start(ctx: BenchContext, *, label: str) -> tuple[str, _Numbers, float, list]:
    """The research source and a gunicorn server, and the ingest-only rate read on it first
    (its rows then set aside): the base URL, the event numbers handed out so far, the rate
    and its runs."""
    broker_purge()
    manage(
        "webhook_source", "create", SLUG, "--handler", "research", "--secret", SECRET
    )
    # The requests of a long run are signed before it starts: the source accepts their age.
    sql(
        "UPDATE webhooks_webhooksource SET timestamp_tolerance_seconds = 7200 "
        "WHERE slug = %s",
        [SLUG],
    )
    base = ctx.gunicorn()
    numbers = _Numbers()
    after_id = _max_id()
    ingest_rps, ingest_runs = _ingest_only(base, numbers)
    print(f"[{label}] ingest only: {ingest_rps:,.0f} req/s", flush=True)
    _ingest_only_rows_set_aside(after_id)
    return base, numbers, ingest_rps, ingest_runs


def run(ctx: BenchContext) -> list[Figure]:
    base, numbers, ingest_rps, ingest_runs = stack_start(ctx, label="endtoend")

    # Worker processes as production runs them: one Celery worker each, pool of one, each
    # with its relay.
    workers: list[Process] = []

    def workers_start() -> None:
        workers.extend(ctx.celery_worker(name=f"e2e{i}") for i in range(WORKERS))
        workers_ready(workers)

    def floor() -> float:
        """The ingest-only rate again, in the state the first was read in: no worker running,
        the written tables just vacuumed, and no vacuum while it is read."""
        with _VACUUM_LOCK:
            for worker in workers:
                ctx.stop(worker)
            workers.clear()
            sql(_VACUUM_SQL)
            after_id = _max_id()
            rps, _ = _ingest_only(base, numbers)
            _ingest_only_rows_set_aside(after_id)
        workers_start()
        return rps

    workers_start()
    with _autovacuum_stand_in() as vacuumed:
        probes, confirmations, sustained, latency = _find_rate(
            base, numbers, ingest_rps, floor
        )

    extra = {
        "ingest_only_first": ingest_rps,
        "ingest_only_runs": [r.as_dict() for r in ingest_runs],
        "probes": probes,
        "confirmations": confirmations,
        "workers": WORKERS,
        "gunicorn_workers": BENCH_WEB_WORKERS,
        "connections": CONNECTIONS,
        "lag_limit_s": LAG_LIMIT_SECONDS,
        # What the autovacuum stand-in ran over the whole run, each statement how often
        # (None: the server's own autovacuum was on).
        "autovacuum_stand_in": None
        if vacuumed is None
        else dict(collections.Counter(vacuumed)),
    }
    figures = [
        Figure(
            "endtoend",
            f"sustained rate, {SECONDS:g} s, lag < {LAG_LIMIT_SECONDS:g} s",
            sustained["rate"] if sustained else 0.0,
            "ev/s",
            floor_name="ingest only, around the run",
            floor_value=sustained["ingest_only"] if sustained else ingest_rps,
            target_ratio=TARGET_RATIO,
            extra=extra,
        )
    ]
    if sustained is not None:
        figures.append(
            Figure(
                "endtoend",
                "the same rate against the first ingest-only floor",
                sustained["rate"],
                "ev/s",
                floor_name="ingest only, at the start",
                floor_value=ingest_rps,
            )
        )
        # What a message's cost weighs against an event's: the relay's pause grows with the
        # rate (docs/subsystems/relay.md, "How fast it wakes"), so a slower host holds a
        # lower rate in emptier messages, and processing costs it more an event.
        figures.append(
            Figure(
                "endtoend",
                "events a message at the sustained rate",
                sustained["events_per_message"],
                "events",
            )
        )
        figures.append(
            Figure(
                "endtoend",
                "max queue lag at the sustained rate",
                sustained["max_queue_lag_s"],
                "s",
                higher_is_better=False,
            )
        )
    if latency is not None:
        for pct, limit in (("p50", 50.0), ("p99", 500.0)):
            figures.append(
                Figure(
                    "endtoend",
                    f"accepted -> processed {pct} at half that rate",
                    latency[f"{pct}_ms"],
                    "ms",
                    floor_name=f"{limit:g} ms limit",
                    floor_value=limit,
                    target_ratio=1.0,
                    higher_is_better=False,
                    extra=latency,
                )
            )
    return figures


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="endtoend")


if __name__ == "__main__":
    main()
