"""What an event costs the machine, and which process pays: the CPU time per event of each
kind of process, read from ``/proc`` over a run at a fixed offered rate of signed new events,
first with ingest alone (no worker running: what accepting costs), then with the workers
processing what arrives (end to end: what accepting and processing cost together, sharing the
cores). What processing costs is the difference, the web's extra cost from sharing the cores
with the workers included; it is reported over what accepting costs.

The kinds: ``web`` (gunicorn's master and workers), ``worker_main`` (each Celery worker's main
process: the consumer and the relay's thread), ``pool`` (their pool processes), ``postgres``
(every process of the database server: backends, WAL writer, checkpointer), ``redis`` (the
broker), ``load`` (wrk). Each run also reads the events per message (one batch claim stamps
its rows' attempts alike), the accepted -> processed latency and where it goes (waiting for
the relay, the message's way to a worker, the batch's run), and how busy the cores were
(``/proc/stat``) and how long tasks waited for one (``/proc/pressure/cpu``, where present).

Rates: ``BENCH_COSTS_SHARES`` (``0.3,0.6``) of the ingest-only rate measured first, as
``bench.endtoend`` measures it; ``BENCH_COSTS_SECONDS`` (20) per run. At each rate,
``BENCH_COSTS_ROUNDS`` (2) rounds of the two runs back to back, ingest alone first in even
rounds and second in odd ones: each round's processing is judged against its own round's
accepting, and a figure is the median of the rounds' (a host whose speed drifts moves a
round's two runs together, docs/benchmarks.md, "How to read it").

Run alone: ``python -m bench.costs``.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from statistics import median

from bench.endtoend import (
    SLUG,
    WRITTEN_TABLES,
    _ingest_only_rows_set_aside,
    _max_id,
    _Numbers,
    _wait_drained,
    _wait_settled,
    stack_start,
)
from bench.harness import (
    BenchContext,
    Figure,
    child_pids,
    cpu_pressure_total,
    cpu_seconds,
    cpu_shares,
    database_reset,
    load_run,
    machine_cpu_ticks,
    percentile,
    report,
    sql,
    workers_ready,
)
from bench.ingest import signed_events

SHARES = [float(s) for s in os.environ.get("BENCH_COSTS_SHARES", "0.3,0.6").split(",")]
SECONDS = float(os.environ.get("BENCH_COSTS_SECONDS", "20"))
ROUNDS = max(int(os.environ.get("BENCH_COSTS_ROUNDS", "2")), 1)
WORKERS = int(os.environ.get("BENCH_E2E_WORKERS", "2"))
CONNECTIONS = 32
KINDS = ("web", "worker_main", "pool", "postgres", "redis", "load")


def _server_pids(name: str) -> list[int]:
    """The processes whose command is ``name`` (``/proc/<pid>/comm``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _parent_pid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rpartition(")")[2].split()[1])


def _processes(web: int, workers: list[int]) -> dict[int, tuple[str, bool]]:
    """Each process to read, its kind, and whether its ended children count in it: the
    servers whose children may end during a run (gunicorn recycles its workers, PostgreSQL's
    backends end with their connections) are read with them, through their parent."""
    kinds = {web: ("web", True), **dict.fromkeys(child_pids(web), ("web", False))}
    for main in workers:
        kinds[main] = ("worker_main", False)
        kinds.update(dict.fromkeys(child_pids(main), ("pool", False)))
    postgres = set(_server_pids("postgres"))
    for pid in postgres:
        kinds[pid] = ("postgres", _parent_pid(pid) not in postgres)  # the postmaster
    kinds.update(dict.fromkeys(_server_pids("redis-server"), ("redis", False)))
    return kinds


def _cpu(kinds: dict[int, tuple[str, bool]], web: int, workers: list[int]) -> dict:
    """CPU seconds so far by pid, children that started since included (new gunicorn
    workers, new database backends)."""
    now = _processes(web, workers)
    return {
        pid: (kind, cpu_seconds(pid, ended_children=with_children))
        for pid, (kind, with_children) in {**kinds, **now}.items()
    }


def _load_cpu_seconds() -> float:
    """CPU time of the ended children of this process: wrk's, once it has run."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _measured_run(
    base: str, numbers: _Numbers, *, rate: float, web: int, workers: list[int]
) -> dict:
    """``SECONDS`` at ``rate``, after a warm-up of 5 s at the same rate; CPU per event by
    kind, and, with workers, what the events went through. The warm-up's rows are done with
    before the window opens: processed by the workers, or without them set aside as the
    run's are, so that none is left for the next run's workers to take inside their measured
    window (by the relay's sweep, claimed one by one)."""
    warm_up_after = _max_id()
    load_run(
        f"{base}/webhooks/{SLUG}/",
        requests_=signed_events(numbers.take(int(rate * 5 * 1.1) + 500)),
        seconds=5,
        connections=CONNECTIONS,
        rate=rate,
    )
    # The warm-up's rows done with (processed, or set aside) before the window opens.
    if workers:
        _wait_drained(warm_up_after)
    else:
        _ingest_only_rows_set_aside(warm_up_after)
    sql(f"VACUUM (ANALYZE) {', '.join(WRITTEN_TABLES)}")
    after_id = _max_id()
    kinds = _processes(web, workers)
    before = _cpu(kinds, web, workers)
    load_before, psi_before, stat_before = (
        _load_cpu_seconds(),
        cpu_pressure_total(),
        machine_cpu_ticks(),
    )
    started = time.monotonic()
    result = load_run(
        f"{base}/webhooks/{SLUG}/",
        requests_=signed_events(numbers.take(int(rate * SECONDS * 1.1) + 1000)),
        seconds=SECONDS,
        connections=CONNECTIONS,
        rate=rate,
    )
    if workers:
        _wait_drained(after_id)
    else:
        _wait_settled(after_id)
    elapsed = time.monotonic() - started
    cpu = dict.fromkeys(KINDS, 0.0)
    for pid, (kind, seconds) in _cpu(kinds, web, workers).items():
        cpu[kind] += seconds - before.get(pid, (kind, 0.0))[1]
    cpu["load"] = _load_cpu_seconds() - load_before
    psi_after, stat_after = cpu_pressure_total(), machine_cpu_ticks()
    events = sql("SELECT count(*) FROM webhooks_inboxevent WHERE id > %s", [after_id])[
        0
    ][0]
    run = {
        "rate": rate,
        "achieved_rps": result.rps,
        "events": events,
        "seconds": elapsed,
        "cpu_us_per_event": {k: 1e6 * v / max(events, 1) for k, v in cpu.items()},
        "all_us_per_event": 1e6 * sum(cpu.values()) / max(events, 1),
        **cpu_shares(stat_before, stat_after),
        "cpu_pressure": (psi_after - psi_before) / 1e6 / elapsed
        if psi_before is not None and psi_after is not None
        else None,
    }
    if workers:
        run.update(_processing_figures(after_id))
    else:
        _ingest_only_rows_set_aside(after_id)
    return run


def _processing_figures(after_id: int) -> dict:
    rows = sql(
        "SELECT extract(epoch FROM e.dispatched_at - e.received_at), "
        "extract(epoch FROM a.started_at - e.dispatched_at), "
        "extract(epoch FROM e.processed_at - a.started_at), "
        "extract(epoch FROM e.processed_at - e.received_at), a.started_at "
        "FROM webhooks_inboxevent e JOIN webhooks_inboxattempt a ON a.event_id = e.id "
        "WHERE e.id > %s AND e.processed_at IS NOT NULL",
        [after_id],
    )
    relay, transit, batch, total = (
        [1000 * float(row[i]) for row in rows if row[i] is not None] for i in range(4)
    )
    messages = len({row[4] for row in rows})
    return {
        "events_per_message": len(rows) / max(messages, 1),
        "latency_p50_ms": percentile(total, 50),
        "latency_p99_ms": percentile(total, 99),
        "relay_wait_p50_ms": percentile(relay, 50),
        "to_a_worker_p50_ms": percentile(transit, 50),
        "batch_run_p50_ms": percentile(batch, 50),
    }


def _print(label: str, run: dict) -> None:
    per_kind = ", ".join(
        f"{kind} {us:,.0f}" for kind, us in run["cpu_us_per_event"].items() if us
    )
    extra = ""
    if "events_per_message" in run:
        extra = (
            f"; {run['events_per_message']:.1f} events/message, p50 "
            f"{run['latency_p50_ms']:.0f} ms (relay {run['relay_wait_p50_ms']:.0f}, "
            f"to a worker {run['to_a_worker_p50_ms']:.0f}, batch "
            f"{run['batch_run_p50_ms']:.0f})"
        )
    pressure = run["cpu_pressure"]
    print(
        f"[costs] {label} at {run['rate']:,.0f}/s (answered {run['achieved_rps']:,.0f}/s):"
        f" {run['all_us_per_event']:,.0f} us of CPU per event ({per_kind}); cores busy "
        f"{run['cores_busy']:.0%} (steal {run['steal']:.0%})"
        + (f", CPU pressure {pressure:.0%}" if pressure is not None else "")
        + extra,
        flush=True,
    )


def run(ctx: BenchContext) -> list[Figure]:
    base, numbers, ingest_rps, _ = stack_start(ctx, label="costs")
    web = next(p for p in ctx.processes if "gunicorn" in p.args[0]).pid

    def accepting_run(rate: float) -> dict:
        accepting = _measured_run(base, numbers, rate=rate, web=web, workers=[])
        _print("ingest only", accepting)
        return accepting

    def end_to_end_run(rate: float) -> dict:
        started = [ctx.celery_worker(name=f"costs{i}") for i in range(WORKERS)]
        workers_ready(started)
        workers = [process.pid for process in started]
        both = _measured_run(base, numbers, rate=rate, web=web, workers=workers)
        _print("end to end", both)
        for process in [p for p in ctx.processes if p.pid in workers]:
            ctx.stop(process)
        return both

    figures = []
    for share in SHARES:
        rate = share * ingest_rps
        rounds = []
        for number in range(ROUNDS):
            if number % 2 == 0:
                accepting = accepting_run(rate)
                both = end_to_end_run(rate)
            else:
                both = end_to_end_run(rate)
                accepting = accepting_run(rate)
            rounds.append(_round_figures(accepting, both))
        figures += _share_figures(share, rounds)
    return figures


def _round_figures(accepting: dict, both: dict) -> dict:
    """One round's figures: accepting (the web, the database and the load generator with no
    worker, the load's own CPU left out), processing (what end to end costs beyond accepting
    all of it, the web's difference included), the workers' own with what they add to the
    database and the broker, per event and per message."""
    process_us = both["all_us_per_event"] - accepting["all_us_per_event"]
    per_message = both["events_per_message"] / 1000
    workers_us = (
        both["cpu_us_per_event"]["worker_main"] + both["cpu_us_per_event"]["pool"]
    )
    # The workers and what they add to the database and the broker, without the web's
    # difference between the two runs (which moves with the host's speed by more than
    # processing costs, either way).
    servers_us = sum(
        both["cpu_us_per_event"][kind] - accepting["cpu_us_per_event"][kind]
        for kind in ("postgres", "redis")
    )
    return {
        "workers_and_servers_us": workers_us + servers_us,
        "accept_us": accepting["all_us_per_event"]
        - accepting["cpu_us_per_event"]["load"],
        "process_us": process_us,
        "events_per_message": both["events_per_message"],
        "message_ms": process_us * per_message,
        "workers_message_ms": workers_us * per_message,
        "ingest_only": accepting,
        "end_to_end": both,
    }


def _share_figures(share: float, rounds: list[dict]) -> list[Figure]:
    """The figures of one rate: each the median of its rounds'; the CPU to process an event
    judged by the median of each round's ratio to its own round's CPU to accept one."""

    def middle(key: str) -> float:
        return median(r[key] for r in rounds)

    return [
        Figure(
            "costs",
            f"CPU to process an event, at {share:g} of ingest only",
            middle("process_us"),
            "us",
            floor_name="CPU to accept one",
            floor_value=middle("accept_us"),
            target_ratio=1.0,
            higher_is_better=False,
            extra={"share": share, "rounds": rounds},
            round_ratios=[r["process_us"] / r["accept_us"] for r in rounds],
        ),
        Figure(
            "costs",
            f"workers' and their servers' CPU an event, at {share:g}, no target",
            middle("workers_and_servers_us"),
            "us",
            higher_is_better=False,
        ),
        Figure(
            "costs",
            f"events per message, at {share:g} of ingest only",
            middle("events_per_message"),
            "events",
        ),
        # What one message costs: the processing CPU of its events, and the workers' own
        # share of it (the consumer, the relay's thread and the pool process).
        Figure(
            "costs",
            f"CPU to process a message, at {share:g} of ingest only, no target",
            middle("message_ms"),
            "ms",
            higher_is_better=False,
        ),
        Figure(
            "costs",
            f"workers' CPU per message, at {share:g} of ingest only, no target",
            middle("workers_message_ms"),
            "ms",
            higher_is_better=False,
        ),
    ]


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="costs")


if __name__ == "__main__":
    main()
