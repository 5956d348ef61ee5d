"""What every benchmark shares: a dedicated PostgreSQL database, the product's real processes
(gunicorn, Celery workers) started as in production, wrk as the load generator, and a report
where each figure stands next to its floor from the same run.

A benchmark module (``bench/<name>.py``) exposes ``run(ctx: BenchContext) -> list[Figure]`` and
can be run alone with ``python -m bench.<name>``; ``python -m bench.run`` runs them all and prints
one table plus ``var/bench/results.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import psycopg
import requests

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
OUT_DIR = ROOT / "var" / "bench"
sys.path.insert(0, str(ROOT))

from tests.processes import (  # noqa: E402
    Process,
    celery_beat_command,
    celery_worker_command,
    free_port,
    gunicorn_command,
    relay_command,
    wait_http_ok,
    wait_until,
)

BENCH_DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/bench"
)
BENCH_BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/9")
# Seconds of load per measurement; `make bench BENCH_SECONDS=15` for steadier figures.
BENCH_SECONDS = float(os.environ.get("BENCH_SECONDS", "8"))
BENCH_CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "8"))
# gunicorn's sync workers per server in every benchmark (floors and product alike). Two by
# default, as every figure in docs/benchmarks.md was read; gunicorn.conf.py's own default is
# 2 x cores + 1 (docs/bench-log/2026-12-03.md, "One relay at a time").
BENCH_WEB_WORKERS = int(os.environ.get("BENCH_WEB_WORKERS", "2"))


@dataclass
class Figure:
    """One measured figure, next to the floor it is judged against (same run, same server)."""

    benchmark: str
    name: str
    value: float
    unit: str
    floor_name: str = ""
    floor_value: float | None = None
    target_ratio: float | None = None
    higher_is_better: bool = True
    extra: dict = field(default_factory=dict)
    # Each round's value over its own floor, when the two were measured back to back in
    # interleaved rounds. The figure's ratio is then their median, the ratio of the two
    # medians kept beside it (docs/benchmarks.md, "How to read it").
    round_ratios: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.round_ratios:
            return median(self.round_ratios)
        return self.ratio_of_medians

    @property
    def ratio_of_medians(self) -> float | None:
        """The value over the floor as reported: with rounds, the ratio of two medians,
        each perhaps from a different round."""
        if not self.floor_value:
            return None
        return self.value / self.floor_value

    @property
    def meets_target(self) -> bool | None:
        if self.target_ratio is None or self.ratio is None:
            return None
        if self.higher_is_better:
            return self.ratio >= self.target_ratio
        return self.ratio <= self.target_ratio

    def as_dict(self) -> dict:
        data = asdict(self)
        data["ratio"] = self.ratio
        data["ratio_of_medians"] = self.ratio_of_medians
        data["meets_target"] = self.meets_target
        return data


# --- the database -------------------------------------------------------------------------


def _admin_connect(url: str):
    parsed = urlparse(url)
    return psycopg.connect(
        host=parsed.hostname,
        port=parsed.port or 5432,
        user=parsed.username or "postgres",
        dbname="postgres",
        autocommit=True,
    )


def database_reset(url: str = BENCH_DATABASE_URL) -> None:
    """Drops and recreates the bench database, then migrates it: every run starts empty.
    This process's own Django connections (a benchmark run before may have opened them) are
    closed first: the drop ends them, and Django would not see it before their next
    statement failed."""
    from django.conf import settings

    if settings.configured:
        from django.db import connections

        connections.close_all()
    name = urlparse(url).path.lstrip("/")
    with _admin_connect(url) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            [name],
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    manage("migrate", "--noinput", "-v", "0")


def sql(statement: str, params: Sequence | None = None, url: str = BENCH_DATABASE_URL):
    """Runs one statement on the bench database (autocommit) and returns its rows, if any."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else None


def autovacuum_off() -> bool:
    """Whether the bench server runs without autovacuum (this machine's does): a benchmark
    whose rows are updated then vacuums them itself where autovacuum would, and says so."""
    return sql("SHOW autovacuum")[0][0] != "on"


# --- the processes ------------------------------------------------------------------------


def stack_env(**overrides: str) -> dict[str, str]:
    """Production settings with the floor endpoints (``config.settings.bench``), plain HTTP
    on loopback, the bench database and broker."""
    env = dict(os.environ)
    # The bench settings mount the floors; the variable would make production refuse to start.
    env.pop("BENCH_ENDPOINTS", None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.bench",
            "DJANGO_SECRET_KEY": "bench-only-secret-key-0f1e2d3c4b5a69788796a5b4c3d2e1f0",
            "AUDIT_SEAL_KEY": "bench-only-audit-seal-key-5e4d3c2b1a0f9e8d7c6b",
            "AUDIT_SIGNING_KEY": "PRIVATE+KEY+retrysafe.bench/audit-log+18531c5a+"
            "Aapr28yf4f/LQ83lpcy2BAF5Y9hu5oHE4E7yXNFyChbw",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_HTTPS": "false",
            "DATABASE_URL": BENCH_DATABASE_URL,
            "CELERY_BROKER_URL": BENCH_BROKER_URL,
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            # The stack's workers (several per machine) serve no metrics port; nothing here
            # scrapes them.
            "CELERY_METRICS_PORT": "0",
        }
    )
    env.update(overrides)
    return env


def django_setup() -> None:
    """Django in this process, on the stack's settings and database: for the benchmarks that
    build their requests or rows with the product's own code (signed deliveries, say)."""
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
    django.setup()


def manage(*args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env or stack_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"manage.py {' '.join(args)} failed:\n{result.stderr[-3000:]}"
        )
    return result.stdout


class BenchContext:
    """Owns the processes a benchmark starts, and stops all of them at the end."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-"))
        self.processes: list[Process] = []

    def __enter__(self) -> BenchContext:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def _start(self, command: list[str], log: str, env: dict[str, str]) -> Process:
        process = Process(command, stack_env(**env), self.tmp / log).start()
        self.processes.append(process)
        return process

    def gunicorn(
        self, *, workers: int = BENCH_WEB_WORKERS, app: str = "config.wsgi", **env: str
    ) -> str:
        """Starts gunicorn (sync workers, found stable; the repository's gunicorn.conf.py)
        serving ``app``; returns its base URL."""
        port = free_port()
        self._start(
            [
                *gunicorn_command(port=port, workers=workers, app=app),
                "--log-level",
                "warning",
            ],
            f"gunicorn-{port}.log",
            env,
        )
        base = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{base}/healthz", timeout=60)
        return base

    def celery_worker(
        self,
        *,
        concurrency: int = 1,
        name: str = "bench",
        include: tuple[str, ...] = (),
        **env: str,
    ) -> Process:
        """A worker (with its relay); ``include``: modules of tasks of the benchmarks' own
        (their floors)."""
        command = celery_worker_command(
            concurrency=concurrency, name=name, loglevel="WARNING"
        )
        extra = ["--without-heartbeat", *(f"--include={m}" for m in include)]
        return self._start([*command, *extra], f"worker-{name}.log", env)

    def relay(self, *, name: str = "relay", **env: str) -> Process:
        """``manage.py relay``: an outbox relay apart from the workers."""
        return self._start(relay_command(), f"{name}.log", env)

    def celery_beat(self, **env: str) -> Process:
        command = celery_beat_command(schedule=self.tmp / "celerybeat-schedule")
        return self._start(command, "beat.log", env)

    def stop(self, process: Process) -> None:
        process.stop()
        if process in self.processes:
            self.processes.remove(process)


def workers_ready(
    workers: Sequence[Process], *, timeout: float = 120, url: str = BENCH_DATABASE_URL
) -> float:
    """Until every worker of ``workers`` consumes (its log says it is ready) and has its
    relay report itself since the first of them was started, one of those relays
    publishing; returns the seconds waited. A run measured
    right after workers start then begins with them working: a fixed pause had let a start
    that took longer (5 to 8 s on this machine, docs/bench-log/2026-12-07.md, "Workers
    measured before they had started") into the run, its first events waiting for it."""
    since = min(worker.started_at or 0.0 for worker in workers)
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        for worker in workers:
            if not worker.alive():
                raise RuntimeError(
                    f"a worker ended while starting:\n{worker.log()[-3000:]}"
                )
        if all(" ready." in worker.log() for worker in workers):
            [(relays, active)] = sql(
                "SELECT count(*), count(*) FILTER (WHERE active) FROM core_relayheartbeat "
                "WHERE started_at >= to_timestamp(%s)",
                [since],
                url=url,
            )
            if relays >= len(workers) and active:
                return time.monotonic() - started
        time.sleep(0.1)
    raise RuntimeError(f"{len(workers)} workers not ready within {timeout:g} s")


def broker_purge(url: str = BENCH_BROKER_URL) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


# --- CPU time of processes ------------------------------------------------------------------


def cpu_seconds(pid: int, *, ended_children: bool = False) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``); 0 once it is gone.
    With ``ended_children``, that of its children that ended and that it waited for too: a
    server's workers recycled meanwhile (gunicorn's, PostgreSQL's backends) count in their
    parent once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if ended_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def machine_cpu_ticks() -> list[int]:
    """The machine's CPU ticks since boot by state, summed over its cores (``/proc/stat``):
    user, nice, system, idle, iowait, ..."""
    return [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]


def cpu_pressure_total() -> int | None:
    """Microseconds some task has waited for a CPU since boot (Linux PSI), if present."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return None
    return int(line.rpartition("total=")[2])


def cpu_shares(before: list[int], after: list[int]) -> dict[str, float]:
    """Between two ``machine_cpu_ticks`` readings, the share of the machine's CPU time that
    was neither idle nor waiting for I/O (``cores_busy``, the hypervisor's share included),
    and the share the hypervisor gave to others (``steal``): on a shared host, a core the
    machine had and could not use."""
    ticks = [b - a for a, b in zip(before, after, strict=True)]
    total = max(sum(ticks), 1)
    return {
        "cores_busy": 1 - (ticks[3] + ticks[4]) / total,
        "steal": ticks[7] / total if len(ticks) > 7 else 0.0,
    }


class CoreSampler:
    """Reads ``machine_cpu_ticks`` and ``cpu_pressure_total`` every ``interval`` seconds
    while it runs (a ``with`` block), so that how busy the cores were can be read over a
    window known only afterwards (``over``): a drain's, from its first to its last row
    processed, without the workers' start-up."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.samples: list[tuple[float, list[int], int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CoreSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.samples.append(
                (time.time(), machine_cpu_ticks(), cpu_pressure_total())
            )
            if self._stop.wait(self.interval):
                return

    def over(self, start: float, end: float) -> dict:
        """Cores busy (a share of all of them) and CPU pressure (the share of the time some
        task waited for a CPU) between the samples inside ``start``..``end`` (Unix times);
        empty when fewer than two samples fall inside."""
        inside = [sample for sample in self.samples if start <= sample[0] <= end]
        if len(inside) < 2:
            return {}
        (t0, ticks0, psi0), (t1, ticks1, psi1) = inside[0], inside[-1]
        return {
            **cpu_shares(ticks0, ticks1),
            "cpu_pressure": (psi1 - psi0) / 1e6 / (t1 - t0)
            if psi0 is not None and psi1 is not None
            else None,
            "window_s": t1 - t0,
        }


def child_pids(pid: int) -> list[int]:
    found = subprocess.run(
        ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
    )
    return [int(p) for p in found.stdout.split()]


# --- load: wrk ----------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class LoadResult:
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    statuses: dict[str, int]
    socket_errors: int
    wrapped: int

    def as_dict(self) -> dict:
        return asdict(self)


_WRK_SCRIPT = r"""
local threads = {}
local nthreads = %(threads)d
local reqfile = %(reqfile)s

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

local function split(s, sep)
  local out, start = {}, 1
  while true do
    local i = string.find(s, sep, start, true)
    if not i then table.insert(out, string.sub(s, start)); return out end
    table.insert(out, string.sub(s, start, i - 1))
    start = i + #sep
  end
end

function init(args)
  statuses = {}
  wrapped = 0
  reqs = {}
  pos = 0
  if reqfile == "" then return end
  local n = 0
  for line in io.lines(reqfile) do
    n = n + 1
    if (n - tid) %% nthreads == 0 then
      local parts = split(line, "\t")
      local headers = {}
      if parts[3] ~= "" then
        for _, kv in ipairs(split(parts[3], "\31")) do
          local k, v = string.match(kv, "^([^:]+):(.*)$")
          headers[k] = v
        end
      end
      local body = parts[4]
      if body == "" then body = nil end
      table.insert(reqs, wrk.format(parts[1], parts[2], headers, body))
    end
  end
end

%(pacing)s
function request()
  if #reqs == 0 then return wrk.format() end
  pos = pos + 1
  if pos > #reqs then pos = 1; wrapped = wrapped + 1 end
  return reqs[pos]
end

function response(status, headers, body)
  local key = tostring(status)
  statuses[key] = (statuses[key] or 0) + 1
end

function done(summary, latency, requests)
  local agg, wraps = {}, 0
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses")) do agg[k] = (agg[k] or 0) + v end
    wraps = wraps + t:get("wrapped")
  end
  local parts = {}
  for k, v in pairs(agg) do table.insert(parts, string.format('"%%s": %%d', k, v)) end
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p99_us": %%d, ' ..
    '"socket_errors": %%d, "wrapped": %%d, "statuses": {%%s}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, wraps, table.concat(parts, ", ")))
end
"""


# A fixed offered rate (open loop as far as the connections allow): each wrk thread hands out
# send times spaced by its share of the rate, and ``delay()`` holds every request until its
# slot. A server that falls behind makes the slots pass: requests then go at once, the achieved
# rate drops below the offered one, and the caller sees it.
_WRK_PACING = r"""
local ffi = require("ffi")
ffi.cdef[[
  typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
  int clock_gettime(int clk_id, bench_timespec *tp);
]]
local ts = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end
local interval_ms = %(interval_ms)f
local next_slot = nil

function delay()
  local now = now_ms()
  if next_slot == nil then next_slot = now + interval_ms * (tid - 1) / nthreads end
  local slot = next_slot
  next_slot = next_slot + interval_ms
  if slot <= now then return 0 end
  return slot - now
end
"""


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def load_run(
    url: str,
    *,
    requests_: Iterable[Request] | None = None,
    seconds: float = BENCH_SECONDS,
    connections: int = BENCH_CONNECTIONS,
    threads: int = 2,
    rate: float | None = None,
) -> LoadResult:
    """Drives ``url`` with wrk for ``seconds``. With ``requests_``, each request is sent once in
    order (per wrk thread) and the list wraps only if the run outlasts it (``wrapped`` says so).
    With ``rate``, requests are offered at that many per second in all (``_WRK_PACING``) instead
    of as fast as the connections go."""
    if not wrk_available():
        raise RuntimeError("wrk is not installed (apt-get install wrk)")
    with tempfile.TemporaryDirectory(prefix="wrk-") as tmp:
        reqfile = ""
        if requests_ is not None:
            reqfile = str(Path(tmp) / "requests.tsv")
            with open(reqfile, "wb") as out:
                for req in requests_:
                    headers = "\x1f".join(f"{k}:{v}" for k, v in req.headers.items())
                    if b"\n" in req.body or b"\t" in req.body:
                        raise ValueError(
                            "bench request bodies must be single-line, no tabs"
                        )
                    line = f"{req.method}\t{req.path}\t{headers}\t".encode() + req.body
                    out.write(line + b"\n")
        script = Path(tmp) / "bench.lua"
        script.write_text(
            _WRK_SCRIPT
            % {
                "threads": threads,
                "reqfile": json.dumps(reqfile),
                "pacing": _WRK_PACING % {"interval_ms": 1000 * threads / rate}
                if rate
                else "",
            }
        )
        result = subprocess.run(
            [
                "wrk",
                "-t",
                str(threads),
                "-c",
                str(connections),
                "-d",
                f"{seconds:g}s",
                "--timeout",
                "10s",
                "-s",
                str(script),
                url,
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=seconds + 120,
        )
    line = next(
        (ln for ln in result.stdout.splitlines() if ln.startswith("BENCHJSON ")), None
    )
    if line is None:
        raise RuntimeError(
            f"wrk failed: {result.stdout[-2000:]} {result.stderr[-2000:]}"
        )
    data = json.loads(line.removeprefix("BENCHJSON "))
    duration = data["duration_us"] / 1e6
    return LoadResult(
        requests=data["requests"],
        seconds=duration,
        rps=data["requests"] / duration if duration else 0.0,
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        statuses=data["statuses"],
        socket_errors=data["socket_errors"],
        wrapped=data["wrapped"],
    )


def floors_measure(
    base_url: str, *, seconds: float = BENCH_SECONDS
) -> dict[str, LoadResult]:
    """The two floors of every HTTP benchmark, on the server under test: a bare endpoint, and
    an endpoint doing one raw ``INSERT ... ON CONFLICT`` of a new id per request."""
    from bench.views import FLOOR_TABLE

    sql(f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id text PRIMARY KEY, body bytea)")
    sql(f"TRUNCATE {FLOOR_TABLE}")
    bare = load_run(f"{base_url}/_bench/bare", seconds=seconds)
    body = json.dumps({"event_id": "x", "data": {"summary": "floor"}}).encode()
    expected = int(bare.rps * seconds * 1.5) + 1000
    inserts = (
        Request("POST", "/_bench/insert", {"X-Bench-Id": f"floor-{i}"}, body)
        for i in range(expected)
    )
    insert = load_run(f"{base_url}/_bench/insert", requests_=inserts, seconds=seconds)
    return {"bare": bare, "raw_insert": insert}


def percentile(values: Sequence[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def round_ratios(
    values: Sequence[LoadResult], floors: Sequence[LoadResult]
) -> list[float]:
    """Each round's rate over its own floor's, rounds in order (``Figure.round_ratios``)."""
    if len(values) != len(floors):
        raise ValueError(
            f"{len(values)} rounds of the figure, {len(floors)} of its floor"
        )
    return [value.rps / floor.rps for value, floor in zip(values, floors, strict=True)]


# --- the report ---------------------------------------------------------------------------


def report(figures: Sequence[Figure], *, name: str) -> Path:
    """Prints one table and writes ``var/bench/<name>.json``; returns the file's path."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    header = f"{'benchmark':<12} {'figure':<44} {'value':>12} {'floor':>28} {'ratio':>7} target"
    print(header)
    print("-" * len(header))
    for fig in figures:
        floor = (
            f"{fig.floor_value:,.1f} ({fig.floor_name})"
            if fig.floor_value is not None
            else ""
        )
        ratio = f"{fig.ratio:.2f}" if fig.ratio is not None else ""
        target = ""
        if fig.target_ratio is not None:
            op = ">=" if fig.higher_is_better else "<="
            verdict = {True: "met", False: "MISSED", None: ""}[fig.meets_target]
            target = f"{op} {fig.target_ratio:g} {verdict}"
        value = f"{fig.value:,.1f} {fig.unit}"
        print(
            f"{fig.benchmark:<12} {fig.name:<44} {value:>12} {floor:>28} {ratio:>7} {target}"
        )
        if fig.round_ratios:
            print(
                f"{'':<12}   ratio: the median of the rounds' own "
                f"({', '.join(f'{r:.2f}' for r in fig.round_ratios)}); "
                f"of the two medians {fig.ratio_of_medians:.2f}"
            )
    path = OUT_DIR / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": {"cpus": os.cpu_count()},
                "figures": [fig.as_dict() for fig in figures],
            },
            indent=2,
        )
    )
    print(f"\nwritten: {path.relative_to(ROOT)}")
    return path


def wait_for(predicate, *, timeout: float, what: str):
    return wait_until(predicate, timeout=timeout, interval=0.2, what=what)


def http_get(url: str, **kwargs) -> requests.Response:
    return requests.get(url, timeout=30, **kwargs)
