"""What other work on the machine costs ingest: signed new events as fast as 8 connections go
(no worker running), alone and beside one background load at a time, in alternating rounds:

- ``wal:<MB/s>``: a database session writing that much write-ahead log (rows of about 1,800
  bytes stored uncompressed, inserted every 20 ms, committed without waiting for their
  flush), for little CPU: whether the bytes others write slow a delivery's commit;
- ``cpu:<share>:<ms>``: a database session running a CPU-bound query for ``share`` of every
  ``ms`` milliseconds (the query's length calibrated on the idle server first), writing
  nothing: whether the cores others take slow ingest more than their share.

Each figure is ingest's rate beside the load over its rate alone, the median of the rounds'
own ratios; beside it the background's measured CPU (its backend's, in cores), the log
written per second in all, and for a CPU load the share of ingest lost per core it took (two
cores shared fairly would lose half of ingest per core taken). The loads:
``BENCH_INTERFERENCE_LOADS`` (default ``wal:7,cpu:0.25:20,cpu:0.25:3``); rounds:
``BENCH_INTERFERENCE_ROUNDS`` (3). docs/benchmarks.md, "What other work costs ingest".

Run alone: ``python -m bench.interference``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from statistics import median

import psycopg

from bench.endtoend import _VACUUM_SQL, SLUG, _Numbers
from bench.harness import (
    BENCH_DATABASE_URL,
    BENCH_SECONDS,
    BenchContext,
    Figure,
    cpu_seconds,
    database_reset,
    load_run,
    report,
    sql,
)
from bench.ingest import signed_events, sources_create
from bench.wal import WalRange

LOADS = os.environ.get("BENCH_INTERFERENCE_LOADS", "wal:7,cpu:0.25:20,cpu:0.25:3")
ROUNDS = int(os.environ.get("BENCH_INTERFERENCE_ROUNDS", "3"))
ROW_BYTES = 1800
WAL_TICK = 0.02
BACKGROUND_TABLE = "bench_interference"


@dataclass(frozen=True)
class Load:
    """A background load: ``wal`` (``rate`` MB/s of log) or ``cpu`` (``share`` of a core in
    bursts every ``tick`` seconds)."""

    kind: str
    rate: float = 0.0
    share: float = 0.0
    tick: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Load:
        kind, *values = text.split(":")
        if kind == "wal" and len(values) == 1:
            return cls("wal", rate=float(values[0]))
        if kind == "cpu" and len(values) == 2:
            return cls("cpu", share=float(values[0]), tick=float(values[1]) / 1000)
        raise SystemExit(f"a load is wal:<MB/s> or cpu:<share>:<ms>, not {text!r}")

    @property
    def label(self) -> str:
        if self.kind == "wal":
            return f"beside {self.rate:g} MB/s of log"
        return f"beside {self.share:g} of a core in {self.tick * 1000:g} ms bursts"


class Background(threading.Thread):
    """Runs a load on a session of its own until ``stop`` is set; ``pid`` is its backend's."""

    def __init__(self, load: Load, rows_per_ms: float) -> None:
        super().__init__(daemon=True)
        self.load = load
        self.rows_per_ms = rows_per_ms
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.pid = 0

    def run(self) -> None:
        with psycopg.connect(BENCH_DATABASE_URL, autocommit=True) as conn:
            self.pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            self.ready.set()
            if self.load.kind == "wal":
                conn.execute("SET synchronous_commit = off")
                rows = max(
                    1, round(self.load.rate * 1e6 * WAL_TICK / (ROW_BYTES + 100))
                )
                # Stored as written (``STORAGE PLAIN``: never compressed), so a repeated
                # text costs the log its length.
                statement = (
                    f"INSERT INTO {BACKGROUND_TABLE} (pad)"  # noqa: S608 - a table name
                    " SELECT md5(random()::text) || repeat(md5(n::text), %s)"
                    " FROM generate_series(1, %s) n"
                )
                params: list[int] = [ROW_BYTES // 32, rows]
                tick = WAL_TICK
            else:
                statement = "SELECT count(*) FROM generate_series(1, %s)"
                params = [
                    max(
                        1,
                        round(
                            self.rows_per_ms * self.load.tick * 1000 * self.load.share
                        ),
                    )
                ]
                tick = self.load.tick
            due = time.monotonic()
            while not self.stop.is_set():
                conn.execute(statement, params)
                due += tick
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                else:
                    due = time.monotonic()


def _rows_per_ms() -> float:
    """How many rows of ``generate_series`` the idle server counts in a millisecond."""
    with psycopg.connect(BENCH_DATABASE_URL, autocommit=True) as conn:
        rates = []
        for _ in range(5):
            started = time.monotonic()
            conn.execute("SELECT count(*) FROM generate_series(1, 500000)")
            rates.append(500_000 / ((time.monotonic() - started) * 1000))
    return median(rates)


def run(ctx: BenchContext) -> list[Figure]:
    loads = [Load.parse(text) for text in LOADS.split(",") if text]
    database_reset()
    sources_create()
    sql(f"CREATE TABLE {BACKGROUND_TABLE} (id bigserial PRIMARY KEY, pad text)")
    sql(f"ALTER TABLE {BACKGROUND_TABLE} ALTER pad SET STORAGE PLAIN")
    rows_per_ms = _rows_per_ms()
    base = ctx.gunicorn()
    numbers = _Numbers()
    url = f"{base}/webhooks/{SLUG}/"
    count = int(3000 * BENCH_SECONDS) + 2000
    alone: list[float] = []
    beside: dict[Load, list[tuple[float, float, float]]] = {load: [] for load in loads}
    for number in range(ROUNDS):
        order: list[Load | None] = [None, *loads]
        if number % 2:
            order.reverse()
        for load in order:
            sql(_VACUUM_SQL)
            sql(f"TRUNCATE {BACKGROUND_TABLE}")
            background = Background(load, rows_per_ms) if load else None
            if background:
                background.start()
                background.ready.wait(10)
                time.sleep(0.5)
            cpu_before = cpu_seconds(background.pid) if background else 0.0
            span = WalRange()
            span.start()
            started = time.monotonic()
            result = load_run(url, requests_=signed_events(numbers.take(count)))
            seconds = time.monotonic() - started
            span.stop()
            wal = span.written / seconds / 1e6
            cores = (
                (cpu_seconds(background.pid) - cpu_before) / seconds
                if background
                else 0.0
            )
            if background:
                background.stop.set()
                background.join()
            if set(result.statuses) != {"202"} or result.wrapped:
                raise RuntimeError(
                    f"ingest: {result.statuses}, wrapped {result.wrapped}"
                )
            label = load.label if load else "alone"
            print(
                f"[interference] round {number + 1}, {label}: {result.rps:,.0f} req/s;"
                f" the background {cores:.2f} of a core; log {wal:.1f} MB/s",
                flush=True,
            )
            if load is None:
                alone.append(result.rps)
            else:
                beside[load].append((result.rps, cores, wal))
    figures = [
        Figure("interference", "ingest alone, new events", median(alone), "req/s")
    ]
    for load, runs in beside.items():
        ratios = [rps / floor for (rps, _, _), floor in zip(runs, alone, strict=True)]
        cores = median(c for _, c, _ in runs)
        # Per core taken: a CPU load's measure (the log's writer takes next to none).
        lost = (
            (1 - median(ratios)) / cores
            if load.kind == "cpu" and cores > 0.01
            else None
        )
        figures.append(
            Figure(
                "interference",
                f"ingest {load.label}",
                median(rps for rps, _, _ in runs),
                "req/s",
                floor_name="ingest alone",
                floor_value=median(alone),
                round_ratios=ratios,
                extra={
                    "background_cores": round(cores, 3),
                    "log_mb_per_second": round(median(w for _, _, w in runs), 2),
                    "ingest_lost_per_background_core": lost and round(lost, 2),
                },
            )
        )
    return figures


def main() -> None:
    with BenchContext() as ctx:
        figures = run(ctx)
    report(figures, name="interference")
    for figure in figures[1:]:
        extra = figure.extra
        lost = extra["ingest_lost_per_background_core"]
        print(
            f"{figure.name}: the background {extra['background_cores']:.2f} of a core,"
            f" log {extra['log_mb_per_second']:.1f} MB/s in all"
            + (f"; ingest lost {lost:.2f} of itself per core it took" if lost else "")
        )


if __name__ == "__main__":
    main()
