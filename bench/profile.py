"""Where a request's time goes, socket to response: a sampling profile (py-spy) of one gunicorn
worker while wrk drives one endpoint, folded into the share of samples that each function
(with what it calls) and each file accounts for.

    python -m bench.profile ingest          # signed new events, POST /webhooks/<slug>/
    python -m bench.profile deployments     # POST /api/deployments/ with new keys
    python -m bench.profile raw_insert      # the floor, to read the others against
    python -m bench.profile processing      # one worker's pool process draining research events

``processing`` samples the pool process of one Celery worker (pool of one, with its relay)
while it drains a fixed backlog of PROFILE_PROCESSING_EVENTS research events (20,000 by
default, published as the relay publishes them), twice at once: once on CPU only and once wall
clock (``--idle``, ``profile-processing-wall.*``), and reads the CPU time of the worker's
processes and of their database backends over the drain.

Writes ``var/bench/profile-<name>.txt`` (the summary) and ``profile-<name>.folded`` (the
collapsed stacks, for a flame graph tool). py-spy reads another process's memory: run as
root or with ptrace allowed. The figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.harness import (
    BIN,
    OUT_DIR,
    BenchContext,
    Request,
    broker_purge,
    child_pids,
    cpu_seconds,
    database_reset,
    http_get,
    load_run,
    manage,
    sql,
    stack_env,
)
from bench.ingest import SECRET, SLUG, signed_events

SECONDS = 10.0
RATE = 250  # samples per second
TOP = 40


def _requests(name: str, base: str) -> tuple[str, list[Request]]:
    count = 40000
    if name == "ingest":
        return f"{base}/webhooks/{SLUG}/", signed_events(range(count))
    if name == "raw_insert":
        from bench.views import FLOOR_TABLE

        sql(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id text PRIMARY KEY, body bytea)"
        )
        body = json.dumps({"event_id": "x", "data": {"summary": "floor"}}).encode()
        return f"{base}/_bench/insert", [
            Request("POST", "/_bench/insert", {"X-Bench-Id": f"p-{i}"}, body)
            for i in range(count)
        ]
    if name == "deployments":
        from bench.deployments import TOKEN, deployment_requests

        manage("api_client", "create", "bench", "--token", TOKEN)
        return f"{base}/api/deployments/", deployment_requests(count, prefix="profile")
    raise SystemExit(
        f"unknown profile {name!r}: ingest, deployments, raw_insert or processing"
    )


def _database_backends() -> list[int]:
    """The server processes of the bench database's connections (the web worker's, once it
    has served a request)."""
    return [
        pid
        for (pid,) in sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
    ]


def _summary(folded: str, what: str = "one gunicorn worker") -> str:
    inclusive: collections.Counter[str] = collections.Counter()
    by_file: collections.Counter[str] = collections.Counter()
    total = 0
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        samples = int(count)
        total += samples
        frames = stack.split(";")
        for frame in set(frames):
            inclusive[
                frame.split(" (")[0] + " " + frame.rpartition("(")[2].split(":")[0]
            ] += samples
        leaf = frames[-1]
        by_file[leaf.rpartition("(")[2].split(":")[0]] += samples
    lines = [
        f"{total} samples of {what}\n",
        "inclusive (function and callees):",
    ]
    for frame, samples in inclusive.most_common(TOP):
        lines.append(f"  {100 * samples / total:5.1f}%  {frame}")
    lines.append("\nself time by file:")
    for path, samples in by_file.most_common(TOP):
        lines.append(f"  {100 * samples / total:5.1f}%  {path}")
    return "\n".join(lines) + "\n"


def _spy(pid: int, output: Path, seconds: float, *, wall: bool) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(BIN / "py-spy"),
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(RATE),
            "--format",
            "raw",
            "--duration",
            str(int(seconds)),
            "--nonblocking",
            # CPU: samples only while the process holds the GIL; wall: every sample, waits
            # included.
            "--idle" if wall else "--gil",
            "--output",
            str(output),
        ],
        env=stack_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _processing() -> int:
    """One worker's pool process while it drains a fixed backlog of research events."""
    from bench.harness import django_setup
    from bench.processing import _inbox_fill, _publish_inbox

    events = int(os.environ.get("PROFILE_PROCESSING_EVENTS", "20000"))
    django_setup()
    from django.db.models import Max, Min

    from webhooks.models import TERMINAL_STATUSES, InboxEvent

    filled = _inbox_fill(events, tag="profile")
    ids = [pk for pk, _ in filled]
    rows = InboxEvent.objects.filter(pk__in=ids)
    broker_purge()
    _publish_inbox(filled)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    cpu_path = OUT_DIR / "profile-processing.folded"
    wall_path = OUT_DIR / "profile-processing-wall.folded"
    with BenchContext() as ctx:
        worker = ctx.celery_worker(
            name=f"profile-{time.monotonic_ns()}",
            # The relay's sweep must not add messages for rows that wait in the queue.
            INBOX_REDISPATCH_AFTER_SECONDS="3600",
        )
        main_pid = worker.popen.pid
        deadline = time.monotonic() + 60
        while not (pool := child_pids(main_pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not pool:
            raise SystemExit("the worker started no pool process")
        pool_pid = pool[0]
        # The drain starts when the pool process takes its first message.
        while not rows.filter(processing_status__in=TERMINAL_STATUSES).exists():
            if time.monotonic() > deadline:
                raise SystemExit("the worker processed nothing within 60 s")
            time.sleep(0.05)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (own,) = cursor.fetchone()
        backends = [pid for pid in _database_backends() if pid != own]
        watched = [main_pid, pool_pid, *backends]
        before = {pid: cpu_seconds(pid) for pid in watched}
        t0 = time.monotonic()
        spies = [
            _spy(pool_pid, cpu_path, SECONDS, wall=False),
            _spy(pool_pid, wall_path, SECONDS, wall=True),
        ]
        for spy in spies:
            spy.wait(timeout=60)
        after = {
            pid: cpu_seconds(pid) for pid in watched if Path(f"/proc/{pid}").exists()
        }
        elapsed = time.monotonic() - t0
        done = rows.filter(processing_status__in=TERMINAL_STATUSES).count()
        wait_until_done = time.monotonic() + 600
        # The ids' range, not a statement binding every id (see ``bench.processing``).
        span_rows = InboxEvent.objects.filter(pk__range=(min(ids), max(ids)))
        while span_rows.exclude(processing_status__in=TERMINAL_STATUSES).exists():
            if time.monotonic() > wait_until_done:
                raise SystemExit("the backlog was not drained within 600 s")
            time.sleep(0.2)
        ctx.stop(worker)
    span = rows.aggregate(first=Min("processed_at"), last=Max("processed_at"))
    rate = (events - 1) / (span["last"] - span["first"]).total_seconds()

    def share(pid: int) -> str:
        if pid not in after:
            return "gone"
        return f"{100 * (after[pid] - before[pid]) / elapsed:.0f}% of a core"

    summary = (
        f"processing: {events} research events, {rate:,.1f} events/s over the whole drain "
        f"(profiled: the samplers slow the pool process down)\n"
        f"over the {elapsed:.1f} s sampled ({done} events done by its end): pool process "
        f"{share(pool_pid)}, worker main process {share(main_pid)}, database backends "
        + ", ".join(share(pid) for pid in backends)
        + "\n\nCPU (samples holding the GIL):\n"
        + _summary(cpu_path.read_text(), "the pool process on CPU")
        + "\nwall clock (every sample, waits included):\n"
        + _summary(wall_path.read_text(), "the pool process, wall clock")
    )
    (OUT_DIR / "profile-processing.txt").write_text(summary)
    print(summary)
    return 0


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "ingest"
    if shutil.which("py-spy", path=str(BIN)) is None:
        raise SystemExit(
            "py-spy is not installed (pip install -r requirements/local.txt)"
        )
    database_reset()
    if name == "processing":
        return _processing()
    manage(
        "webhook_source", "create", SLUG, "--handler", "research", "--secret", SECRET
    )
    with BenchContext() as ctx:
        base = ctx.gunicorn(workers=1)
        url, requests_ = _requests(name, base)
        worker_pid = int(
            subprocess.run(
                ["pgrep", "-P", str(ctx.processes[-1].popen.pid)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()[0]
        )
        folded_path = OUT_DIR / f"profile-{name}.folded"
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        spy = subprocess.Popen(
            [
                str(BIN / "py-spy"),
                "record",
                "--pid",
                str(worker_pid),
                "--rate",
                str(RATE),
                "--format",
                "raw",
                "--duration",
                str(int(SECONDS)),
                "--nonblocking",
                # Samples only while the worker holds the GIL: its CPU, not its waits.
                "--gil",
                "--output",
                str(folded_path),
            ],
            env=stack_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1)
        http_get(f"{base}/readyz")  # the worker opens its database connection
        backends = _database_backends()
        before = {pid: cpu_seconds(pid) for pid in [worker_pid, *backends]}
        load = load_run(url, requests_=requests_, seconds=SECONDS, connections=4)
        after = {pid: cpu_seconds(pid) for pid in before}
        spy.wait(timeout=60)
    web_us = 1e6 * (after[worker_pid] - before[worker_pid]) / load.requests
    db_us = 1e6 * sum(after[p] - before[p] for p in backends) / load.requests
    summary = (
        f"{name}: {load.rps:,.0f} req/s, statuses {load.statuses}\n"
        f"CPU per request: web worker {web_us:,.0f} us, its database backend "
        f"{db_us:,.0f} us (profiled: the sampler slows the worker down)\n"
        + _summary(folded_path.read_text())
    )
    (OUT_DIR / f"profile-{name}.txt").write_text(summary)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
