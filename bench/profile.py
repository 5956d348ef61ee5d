"""Where a request's time goes, socket to response: a sampling profile (py-spy) of one gunicorn
worker while wrk drives one endpoint, folded into the share of samples that each function
(with what it calls) and each file accounts for.

    python -m bench.profile ingest          # signed new events, POST /webhooks/<slug>/
    python -m bench.profile deployments     # POST /api/deployments/ with new keys
    python -m bench.profile raw_insert      # the floor, to read the others against

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
    raise SystemExit(f"unknown profile {name!r}: ingest, deployments or raw_insert")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def _summary(folded: str) -> str:
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
        f"{total} samples of one gunicorn worker\n",
        "inclusive (function and callees):",
    ]
    for frame, samples in inclusive.most_common(TOP):
        lines.append(f"  {100 * samples / total:5.1f}%  {frame}")
    lines.append("\nself time by file:")
    for path, samples in by_file.most_common(TOP):
        lines.append(f"  {100 * samples / total:5.1f}%  {path}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "ingest"
    if shutil.which("py-spy", path=str(BIN)) is None:
        raise SystemExit(
            "py-spy is not installed (pip install -r requirements/local.txt)"
        )
    database_reset()
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
        before = {pid: _cpu_seconds(pid) for pid in [worker_pid, *backends]}
        load = load_run(url, requests_=requests_, seconds=SECONDS, connections=4)
        after = {pid: _cpu_seconds(pid) for pid in before}
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
