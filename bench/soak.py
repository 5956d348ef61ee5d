"""The soak: signed events at a fixed rate for a long time (300 per second for 600 s by
default) through the whole stack as production runs it (gunicorn, two Celery workers with
their relays, PostgreSQL, Redis), with the mix a producer's retries make: of every 20
deliveries, 2 are redeliveries of an event sent a moment before (the same bytes, a 200), 1 a
late version (a new event for a document whose newer version was sent a second before, which
processing ignores as out of order) and 17 new events.

It holds when, over the whole run: every answer is a 202 or a 200 and no socket failed; every
event ends processed or ignored as the product says (none failed or dead-lettered) and no
process logged an error; no event waited 5 s or more from accepted to processed; and the
memory of the web, of the workers and of the broker is flat: the median of the last minute
within a tenth of the median of the second minute (the first is warm-up). gunicorn replaces
a web process after about 50,000 requests (gunicorn.conf.py), as in production, so the web's
figure is read with that.

Knobs: ``BENCH_SOAK_RATE`` (300), ``BENCH_SOAK_SECONDS`` (600). The workers' and the web's
memory, the broker's and the oldest waiting event's age are sampled every ``SAMPLE_SECONDS``
and kept in the JSON report.

Run alone: ``python -m bench.soak``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path

import redis

from bench.endtoend import (
    CONNECTIONS,
    LAG_LIMIT_SECONDS,
    TERMINAL_OK,
    _autovacuum_stand_in,
    _max_id,
    _wait_drained,
    stack_start,
)
from bench.harness import (
    BENCH_BROKER_URL,
    BenchContext,
    Figure,
    Request,
    child_pids,
    database_reset,
    django_setup,
    load_run,
    median,
    percentile,
    report,
    sql,
    workers_ready,
)
from bench.ingest import SLUG, event_body, signed_delivery
from tests.integrations.research.factories import research_event

RATE = float(os.environ.get("BENCH_SOAK_RATE", "300"))
SECONDS = float(os.environ.get("BENCH_SOAK_SECONDS", "600"))
WORKERS = 2
SAMPLE_SECONDS = 5.0
# Of every MIX_PERIOD deliveries: which are redeliveries and which late versions.
MIX_PERIOD = 20
REDELIVERED_AT = (3, 13)
LATE_AT = (8,)
# How far back a redelivery's event and a late version's newer event were sent.
REDELIVERY_BACK = 30
LATE_BACK = 300
MEMORY_LIMIT_RATIO = 1.1
_ERROR_LINE = re.compile(r"\bERROR\b|Traceback|CRITICAL")


def soak_requests(first: int, count: int) -> tuple[list[Request], list[str]]:
    """``count`` deliveries in the soak's mix, new events numbered from ``first``; and the
    kind of each (``new``, ``redelivery``, ``late``)."""
    django_setup()
    now = int(time.time())
    requests_: list[Request] = []
    sent: list[tuple[int, bytes]] = []  # the new events' numbers and bytes, in order
    kinds: list[str] = []
    n = first
    for i in range(count):
        slot = i % MIX_PERIOD
        if slot in REDELIVERED_AT and len(sent) > REDELIVERY_BACK:
            # The very bytes sent before: a producer's retry.
            number, raw = sent[-REDELIVERY_BACK]
            requests_.append(
                signed_delivery(raw, event_id=f"evt-bench-{number}", timestamp=now)
            )
            kinds.append("redelivery")
        elif slot in LATE_AT and len(sent) > LATE_BACK:
            # The document of an event sent about a second ago, at the version just before
            # its: older than what is stored once that event is applied.
            newer, _ = sent[-LATE_BACK]
            event_id = f"evt-bench-late-{newer}"
            body = research_event(
                number=newer,
                event_id=event_id,
                entity_id=f"doc-{newer % 5000}",
                source_version=newer - 1,
                producer="bench",
            )
            raw = json.dumps(body, separators=(",", ":")).encode()
            requests_.append(signed_delivery(raw, event_id=event_id, timestamp=now))
            kinds.append("late")
        else:
            raw = event_body(n)
            requests_.append(
                signed_delivery(raw, event_id=f"evt-bench-{n}", timestamp=now)
            )
            sent.append((n, raw))
            kinds.append("new")
            n += 1
    return requests_, kinds


def _rss_mb(pid: int) -> float:
    """The resident memory of ``pid`` and its children, in MB (0 for a process gone)."""
    total = 0
    for one in [pid, *child_pids(pid)]:
        try:
            status = Path(f"/proc/{one}/status").read_text()
        except OSError:
            continue
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        if match:
            total += int(match.group(1))
    return total / 1024


class _Sampler:
    """Every ``SAMPLE_SECONDS`` in a thread: the memory of the web and of each worker (each
    with its children), the broker's memory, and the age of the oldest event of the run not
    yet processed."""

    def __init__(self, web: int, workers: list[int], after_id: int) -> None:
        self.web = web
        self.workers = workers
        self.after_id = after_id
        self.samples: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, name="soak-sampler", daemon=True
        )
        self.started = time.monotonic()
        self.broker = redis.Redis.from_url(BENCH_BROKER_URL)

    def __enter__(self) -> _Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=60)

    def _run(self) -> None:
        while not self.stop.wait(SAMPLE_SECONDS):
            oldest = sql(
                "SELECT extract(epoch FROM now() - min(received_at)) "
                "FROM webhooks_inboxevent WHERE id > %s "
                "AND processing_status IN ('received', 'processing', 'failed')",
                [self.after_id],
            )[0][0]
            self.samples.append(
                {
                    "t": round(time.monotonic() - self.started, 1),
                    "web_mb": _rss_mb(self.web),
                    "workers_mb": sum(_rss_mb(pid) for pid in self.workers),
                    "broker_mb": self.broker.info("memory")["used_memory"] / 2**20,
                    "oldest_waiting_s": float(oldest or 0.0),
                }
            )

    def window(self, key: str, start: float, end: float) -> float:
        values = [s[key] for s in self.samples if start <= s["t"] < end]
        return median(values) if values else 0.0


def _error_lines(ctx: BenchContext) -> list[str]:
    lines = []
    for process in ctx.processes:
        lines += [
            f"{process.log_path.name}: {line}"
            for line in process.log().splitlines()
            if _ERROR_LINE.search(line)
        ]
    return lines


def run(ctx: BenchContext) -> list[Figure]:
    base, numbers, ingest_rps, _ = stack_start(ctx, label="soak")
    web = next(p for p in ctx.processes if "gunicorn" in p.args[0]).pid
    started = [ctx.celery_worker(name=f"soak{i}") for i in range(WORKERS)]
    workers_ready(started)
    workers = [process.pid for process in started]

    count = int(RATE * SECONDS * 1.05) + 1000
    first = numbers.take(count).start
    requests_, kinds = soak_requests(first, count)
    after_id = _max_id()
    print(
        f"[soak] {RATE:,.0f} events/s for {SECONDS:g} s (ingest only read "
        f"{ingest_rps:,.0f} req/s on this server)",
        flush=True,
    )
    with _autovacuum_stand_in(), _Sampler(web, workers, after_id) as sampler:
        load = load_run(
            f"{base}/webhooks/{SLUG}/",
            requests_=requests_,
            seconds=SECONDS,
            connections=CONNECTIONS,
            rate=RATE,
        )
        try:
            _wait_drained(after_id, timeout=120)
            drained = True
        except AssertionError:
            drained = False

    # What was sent: the first ``load.requests`` of the list, give or take those in flight.
    sent_kinds = {kind: kinds[: load.requests].count(kind) for kind in set(kinds)}
    rows = sql(
        "SELECT processing_status, count(*), sum(delivery_count - 1) "
        "FROM webhooks_inboxevent WHERE id > %s GROUP BY processing_status",
        [after_id],
    )
    statuses = {status: n for status, n, _ in rows}
    counted_redeliveries = sum(int(r or 0) for *_, r in rows)
    waits = [
        float(w)
        for (w,) in sql(
            "SELECT extract(epoch FROM processed_at - received_at) "
            "FROM webhooks_inboxevent WHERE id > %s AND processed_at IS NOT NULL",
            [after_id],
        )
    ]
    max_lag = max(waits, default=0.0)
    dead = statuses.get("dead_lettered", 0)
    not_ok = sum(n for status, n in statuses.items() if status not in TERMINAL_OK)
    bad_answers = {k: v for k, v in load.statuses.items() if k not in {"200", "202"}}
    errors = _error_lines(ctx)

    minute = 60.0
    end = max((s["t"] for s in sampler.samples), default=SECONDS)
    memory = {}
    for key in ("web_mb", "workers_mb", "broker_mb"):
        start_mb = sampler.window(key, minute, 2 * minute)
        end_mb = sampler.window(key, end - minute, end + 1)
        memory[key] = {"minute_2": start_mb, "last_minute": end_mb}
    reasons = []
    if bad_answers or load.socket_errors:
        reasons.append(f"answers {load.statuses}, socket errors {load.socket_errors}")
    if load.wrapped:
        reasons.append("the request list wrapped")
    if load.rps < 0.97 * RATE:
        reasons.append(f"answered {load.rps:.0f}/s of {RATE:.0f}/s offered")
    if not drained or not_ok or dead:
        reasons.append(f"{not_ok} events not processed, {dead} dead-lettered")
    if max_lag >= LAG_LIMIT_SECONDS:
        reasons.append(f"an event waited {max_lag:.1f} s")
    if errors:
        reasons.append(f"{len(errors)} error lines in the logs")
    for key, values in memory.items():
        if values["last_minute"] > MEMORY_LIMIT_RATIO * values["minute_2"]:
            reasons.append(
                f"{key} grew from {values['minute_2']:.1f} to {values['last_minute']:.1f}"
            )
    verdict = "holds" if not reasons else f"does not hold ({'; '.join(reasons)})"
    print(
        f"[soak] {verdict}: answered {load.rps:,.1f}/s {load.statuses}, sent {sent_kinds}, "
        f"rows {statuses}, redeliveries counted {counted_redeliveries}, max lag "
        f"{max_lag:.2f} s (p50 {percentile(waits, 50) * 1000:.0f} ms, p99 "
        f"{percentile(waits, 99) * 1000:.0f} ms), memory {memory}",
        flush=True,
    )
    for line in errors[:20]:
        print(f"[soak] {line}", flush=True)

    extra = {
        "rate": RATE,
        "seconds": SECONDS,
        "holds": not reasons,
        "why_not": "; ".join(reasons),
        "answered_rps": load.rps,
        "answers": load.statuses,
        "socket_errors": load.socket_errors,
        "sent": sent_kinds,
        "rows": statuses,
        "redeliveries_counted": counted_redeliveries,
        "dead_lettered": dead,
        "error_lines": errors[:50],
        "latency_p50_ms": percentile(waits, 50) * 1000,
        "latency_p99_ms": percentile(waits, 99) * 1000,
        "memory_mb": memory,
        "samples": sampler.samples,
        "ingest_only_rps": ingest_rps,
    }
    figures = [
        Figure(
            "soak",
            f"max accepted -> processed over {SECONDS:g} s at {RATE:g} events/s "
            "(10% redeliveries, 5% late versions)",
            max_lag,
            "s",
            floor_name=f"{LAG_LIMIT_SECONDS:g} s limit",
            floor_value=LAG_LIMIT_SECONDS,
            target_ratio=1.0,
            higher_is_better=False,
            extra=extra,
        ),
        Figure(
            "soak",
            "errors: answers not 200/202, socket errors, events not processed, "
            "dead letters, error lines in the logs",
            float(
                sum(bad_answers.values())
                + load.socket_errors
                + (not_ok if drained else max(not_ok, 1))
                + len(errors)
            ),
            "errors",
            floor_name="none",
            higher_is_better=False,
        ),
    ]
    for key, label in (
        ("web_mb", "the web's memory"),
        ("workers_mb", "the workers' memory"),
        ("broker_mb", "the broker's memory"),
    ):
        figures.append(
            Figure(
                "soak",
                f"{label}, the last minute / the second minute",
                memory[key]["last_minute"],
                "MB",
                floor_name="the second minute",
                floor_value=memory[key]["minute_2"],
                target_ratio=MEMORY_LIMIT_RATIO,
                higher_is_better=False,
            )
        )
    return figures


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="soak")


if __name__ == "__main__":
    main()
