"""``make chaos CLUSTER=1``: the stack on several hosts of its own, network namespaces this run
makes on this machine (chaos.netns), and faults between them under ``make chaos``'s load.

The hosts (db, broker, web1, web2, worker1, worker2, receiver) and the router that joins them,
the faults (partitions, a host killed, a slow or lossy link through chaos.linkproxy), what
"served again" and "whole again" measure after each, and the invariants checked on top of
chaos.run's are docs/scaling.md, "Several hosts, measured". The schedule is drawn from the
seed (printed, so that ``--seed`` repeats it); the bounds are ``ANSWER_BOUND`` and
``RECOVERY_BOUND`` below.

Prints the schedule, a table of the faults with their recovery times and the figures, and
writes ``var/chaos/result.json`` as ``make chaos`` does. Needs root; everything it makes is
removed at its end, on Ctrl-C and on SIGTERM, and the leftovers of a run killed outright by
the next run.

    python -m chaos.cluster [--size small|medium|large] [--seed N] [--subnet 10.213.7.0/24]
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import itertools
import json
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import requests

from bench.harness import manage, stack_env
from chaos import netns
from chaos.run import (
    RESULT,
    SOURCE,
    TRIGGERED_REPOSITORY,
    TUNABLES,
    ChaosReceiver,
    Outcome,
    Producer,
    Run,
    chaos_event,
    load,
    logs_keep,
    receiver_check,
    recovered_check,
    result_write,
    send_deployment,
    send_event,
    stack_prepare,
    trigger_target_create,
)
from chaos.services import PrivatePostgres, PrivateRedis
from tests.processes import (
    Process,
    celery_beat_command,
    celery_worker_command,
    gunicorn_command,
    wait_http_ok,
    wait_until,
)

# name: (role, last octet of its address)
HOSTS = {
    "db": ("database", 10),
    "broker": ("broker", 11),
    "web1": ("web", 21),
    "web2": ("web", 22),
    "worker1": ("worker", 31),
    "worker2": ("worker", 32),
    "receiver": ("receiver", 40),
}
WEBS = ("web1", "web2")
WORKERS = ("worker1", "worker2")
BEAT_HOST = "worker1"
WEB_PORT, PG_PORT, REDIS_PORT = 8000, 5432, 6379
RECEIVER_PORT, PROBE_RECEIVER_PORT = 9000, 9001
WEB_WORKERS = 2
# The fault proxy's port for each host's link to the database, and to the broker.
DB_LINKS = {"web1": 6401, "web2": 6402, "worker1": 6403, "worker2": 6404}
BROKER_LINKS = {"worker1": 6501, "worker2": 6502}
# The probes' deployments go to the receiver that never fails.
PROBE_REPOSITORY = "acme/chaos-probe"
LINK_RATE = "256kbit"

SIZES = {
    # chaos.run's load; ``rounds`` of every kind of fault, each lasting ``fault_seconds``
    # (a slow or lossy link twice as long).
    "small": {
        "entities": 10,
        "versions": 4,
        "deployments": 12,
        "rounds": 1,
        "fault_seconds": (6, 10),
    },
    # A medium or large run's partitions last on either side of the 19 s after which a
    # connection to the database gives up (docs/scaling.md, "Database timeouts").
    "medium": {
        "entities": 45,
        "versions": 8,
        "deployments": 60,
        "rounds": 2,
        "fault_seconds": (10, 30),
    },
    "large": {
        "entities": 150,
        "versions": 10,
        "deployments": 200,
        "rounds": 4,
        "fault_seconds": (15, 40),
    },
}

# chaos.run's, with a seal round every 5 s of rows 5 s old (so that a run of minutes makes
# many checkpoints) and relays that report every second (a worker's recovery is seen then).
CLUSTER_TUNABLES = {
    **TUNABLES,
    "AUDIT_SEAL_INTERVAL_SECONDS": "5",
    "AUDIT_SEAL_HORIZON_SECONDS": "5",
    "RELAY_HEARTBEAT_SECONDS": "1",
}

# The longest a request may wait for its answer. The web's own bounds (docs/scaling.md,
# "Database timeouts") end a request whose database went away within 9 s (a kept connection:
# the bounded health check, then the connect timeout); a request that arrives meanwhile waits
# for one of its server's two sync workers first, and the machine the runs are made on is
# shared (two cores): the slowest 503 measured there took 12.0 s. Far below gunicorn's
# timeout (30 s), past which the request would be a hang.
ANSWER_BOUND = 20.0
# How long after a fault ends a host's answers may still show it (a 503 on a connection kept
# from before, say), and how long the system has to be whole again.
GRACE = 10.0
RECOVERY_BOUND = 120.0
# The producers' (connect, read) timeouts: a host that is gone costs a retry 3 s, and an
# answer later than ANSWER_BOUND is still seen, as late.
PRODUCER_TIMEOUT = (3.05, 45.0)
# Between the end of one fault's recovery and the next fault.
GAP_SECONDS = 3.0

KINDS = {
    "worker-db": "worker host cut from the database, not the broker",
    "worker-broker": "worker host cut from the broker, not the database",
    "web-db": "web host cut from the database, the other serving",
    "isolate": "host cut from everything",
    "kill": "host killed (every process at once), then started",
    "bandwidth": f"host's link limited to {LINK_RATE} (tbf)",
    "proxy": "link delayed and lossy (the TCP fault proxy)",
}


@dataclass
class ClusterFault:
    kind: str
    hosts: list[str]
    seconds: float
    options: dict = field(default_factory=dict)
    start: float = 0.0  # time.monotonic()
    healed: float = 0.0
    served: float | None = None  # a probe sent once it ended went through
    recovered: float | None = None  # every host whole again besides
    error: str = ""
    # What the requests sent from its start until the system was whole again got: per web
    # host, the count of each status ("None": no answer), and the slowest answer.
    answers: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        detail = ", ".join(f"{k} {v}" for k, v in self.options.items())
        return f"{self.kind} {'/'.join(self.hosts)}" + (
            f" ({detail})" if detail else ""
        )

    @property
    def recovery(self) -> float | None:
        return None if self.recovered is None else self.recovered - self.healed

    @property
    def serving(self) -> float | None:
        return None if self.served is None else self.served - self.healed

    def overlaps(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` was under way while the fault lasted, or while its effects
        may still show."""
        end = self.recovered
        if end is None:
            end = self.healed + RECOVERY_BOUND
        return outcome.sent <= end + GRACE and outcome.at >= self.start - 1

    def unreachable(self, web: str, sender: str) -> bool:
        """Whether the fault cut the way between ``sender`` and web host ``web``."""
        return self.kind in ("isolate", "kill") and bool(
            {web, sender} & set(self.hosts)
        )

    def impairs_database(self) -> bool:
        """Whether the fault impaired some host's way to the database. Any web host may
        then answer 503: its own statements wait, or a statement of its waits for rows that
        a transaction of the host cut off holds locked (the statement timeout: a worker cut
        from the database in the middle of a job's transaction made a status report for that
        job wait 5 s, on either web host). A host killed is not one: its sockets close with
        it, and the server ends its transactions at once."""
        if self.kind in ("web-db", "worker-db"):
            return True
        if self.kind in ("isolate", "bandwidth"):
            return self.hosts[0] not in ("broker", "receiver")
        if self.kind == "kill":
            return self.hosts == ["db"]
        return self.kind == "proxy" and "db" in self.hosts

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "description": KINDS[self.kind],
            "hosts": self.hosts,
            "options": self.options,
            "seconds": round(self.healed - self.start, 1) if self.healed else None,
            "served_again_s": None if self.serving is None else round(self.serving, 2),
            "recovery_s": None if self.recovery is None else round(self.recovery, 2),
            "answers": self.answers,
            "error": self.error,
        }

    def answers_record(self, run: Run, webs: dict[str, str]) -> None:
        """What the requests sent from its start until the system was whole again got."""
        end = self.recovered if self.recovered is not None else self.healed
        during = [o for o in run.outcomes if o.sent <= end and o.at >= self.start]
        counts: dict[str, Counter] = defaultdict(Counter)
        for outcome in during:
            counts[webs.get(outcome.host, outcome.host)][str(outcome.status)] += 1
        self.answers = {
            web: dict(sorted(c.items())) for web, c in sorted(counts.items())
        }
        answered = [o.at - o.sent for o in during if o.status is not None]
        self.answers["slowest_s"] = round(max(answered, default=0.0), 2)


def fault_plan(rng: random.Random, size: dict) -> list[ClusterFault]:
    """``size["rounds"]`` faults of each kind, in an order and on hosts drawn from ``rng``."""
    kinds = list(KINDS) * size["rounds"]
    rng.shuffle(kinds)
    low, high = size["fault_seconds"]
    every_host = sorted(HOSTS)
    choices: dict[str, Callable[[], list[str]]] = {
        "worker-db": lambda: [rng.choice(WORKERS), "db"],
        "worker-broker": lambda: [rng.choice(WORKERS), "broker"],
        "web-db": lambda: [rng.choice(WEBS), "db"],
        "isolate": lambda: [rng.choice(every_host)],
        "kill": lambda: [rng.choice([h for h in every_host if h != "receiver"])],
        "bandwidth": lambda: [rng.choice(every_host)],
        "proxy": lambda: list(
            rng.choice(
                [(h, "db") for h in DB_LINKS] + [(h, "broker") for h in BROKER_LINKS]
            )
        ),
    }
    plan = []
    for kind in kinds:
        fault = ClusterFault(kind, choices[kind](), round(rng.uniform(low, high), 1))
        if kind in ("bandwidth", "proxy"):
            fault.seconds *= 2
        if kind == "bandwidth":
            fault.options = {"rate": LINK_RATE}
        if kind == "proxy":
            fault.options = {
                "delay_s": round(rng.uniform(0.05, 0.2), 2),
                "loss": round(rng.uniform(0.05, 0.2), 2),
            }
        plan.append(fault)
    return plan


def seconds(value: float | None) -> str:
    return "NOT" if value is None else f"{value:.1f} s"


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class Cluster:
    """The hosts' processes: started as each host's role runs them, killed a host at a time,
    stopped at the end."""

    def __init__(self, net: netns.Network, root: Path, seed: int):
        self.net, self.root, self.seed = net, root, seed
        self.logs = root / "logs"
        self.logs.mkdir(parents=True)
        self.processes: dict[str, list[Process]] = defaultdict(list)
        self.pg = PrivatePostgres(
            root,
            host=net.address("db"),
            port=PG_PORT,
            trust=[str(net.subnet)],
            wrap=net.inside("db"),
        )
        self.redis = PrivateRedis(
            root, host=net.address("broker"), port=REDIS_PORT, wrap=net.inside("broker")
        )
        self.control = root / "links.json"
        self.modes: dict[str, dict] = {}

    def base(self, web: str) -> str:
        return f"http://{self.net.address(web)}:{WEB_PORT}"

    @property
    def bases(self) -> list[str]:
        return [self.base(web) for web in WEBS]

    def env(self, host: str | None = None) -> dict[str, str]:
        """The stack's settings on ``host`` (through its links' fault proxies); None: this
        process's, straight to the servers."""
        db_port = DB_LINKS.get(host or "", PG_PORT)
        broker_port = BROKER_LINKS.get(host or "", REDIS_PORT)
        return {
            **CLUSTER_TUNABLES,
            "DATABASE_URL": f"postgres://postgres@{self.net.address('db')}:{db_port}/chaos",
            "CELERY_BROKER_URL": f"redis://{self.net.address('broker')}:{broker_port}/0",
            "DJANGO_ALLOWED_HOSTS": ",".join(self.net.address(web) for web in WEBS),
        }

    def _run(self, host: str, name: str, command: list[str]) -> None:
        process = Process(
            [*self.net.inside(host), *command],
            stack_env(**self.env(host)),
            self.logs / f"{host}-{name}.log",
        )
        self.processes[host].append(process.start())

    def _links(self, host: str, port: int, links: dict[str, int]) -> None:
        self._run(
            host,
            "linkproxy",
            [
                *(sys.executable, "-m", "chaos.linkproxy"),
                *("--listen", self.net.address(host), "--target", f"127.0.0.1:{port}"),
                *(f"--link={name}-{host}={link}" for name, link in links.items()),
                *("--control", str(self.control), "--seed", str(self.seed)),
            ],
        )

    def start(self, host: str, *, first: bool = False) -> None:
        """``host``'s processes started (``first``: its database made first)."""
        role = HOSTS[host][0]
        address = self.net.address(host)
        if role == "database":
            self.pg.init() if first else self.pg.start()
            self._links(host, PG_PORT, DB_LINKS)
        elif role == "broker":
            self.redis.start()
            self._links(host, REDIS_PORT, BROKER_LINKS)
        elif role == "web":
            command = gunicorn_command(port=WEB_PORT, workers=WEB_WORKERS, host=address)
            self._run(host, "gunicorn", [*command, "--log-level", "warning"])
        elif role == "worker":
            command = celery_worker_command(name=host, loglevel="WARNING")
            self._run(host, "worker", [*command, "--without-heartbeat"])
            if host == BEAT_HOST:
                schedule = self.root / "celerybeat-schedule"
                self._run(host, "beat", celery_beat_command(schedule=schedule))

    def ready(self, host: str) -> None:
        """Waits until ``host`` serves (its link proxies listen, its web answers)."""
        links = {"db": DB_LINKS, "broker": BROKER_LINKS}.get(host, {})
        for port in links.values():
            address = self.net.address(host)
            wait_until(lambda p=port, a=address: port_open(a, p), timeout=60)
        if HOSTS[host][0] == "web":
            wait_http_ok(f"{self.base(host)}/healthz", timeout=120)

    def kill(self, host: str) -> None:
        """Every process of ``host`` killed at once (SIGKILL), as when the machine dies."""
        self.net.kill(host)
        for process in self.processes.pop(host, []):
            if process.popen is not None:
                process.popen.wait(timeout=30)

    def worker_pid(self, worker: str) -> int | None:
        found = [p for p in self.processes.get(worker, []) if "worker" in p.args]
        return found[0].pid if found else None

    def link_mode(self, link: str, mode: dict | None) -> None:
        """The fault proxies' mode of ``link`` (None: bytes as they come)."""
        if mode:
            self.modes[link] = mode
        else:
            self.modes.pop(link, None)
        written = self.control.with_suffix(".new")
        written.write_text(json.dumps(self.modes))
        written.replace(self.control)

    def stop(self) -> None:
        for processes in self.processes.values():
            for process in processes:
                process.stop(timeout=10)
        self.pg.destroy()
        self.redis.destroy()


class Injector:
    """Injects each fault for its time, then measures how long until the system is whole."""

    def __init__(self, cluster: Cluster, producer: Producer, run: Run):
        self.cluster, self.net = cluster, cluster.net
        self.producer, self.run = producer, run
        self.probes = itertools.count(1)
        self.probe_keys: list[str] = []

    def inject(self, fault: ClusterFault) -> None:
        fault.start = time.monotonic()
        self.run.scheduled.append(fault.kind)
        print(f"[cluster] {fault.name}: {fault.seconds:.1f} s", flush=True)
        try:
            self._fault(fault)
        except Exception as exc:  # a fault that could not be injected is reported
            fault.error = repr(exc)
            self.run.faults.append(
                (f"FAILED to inject {fault.kind}: {exc!r}", time.monotonic(), 0)
            )
        fault.healed = time.monotonic()
        if not fault.error:
            self.run.faults.append((fault.name, fault.start, fault.healed))
        fault.served, fault.recovered = self.whole_again(fault)
        print(
            f"[cluster] {fault.name}: ended; served again after {seconds(fault.serving)}, "
            f"whole again after {seconds(fault.recovery)}",
            flush=True,
        )

    def _fault(self, fault: ClusterFault) -> None:
        net, hosts = self.net, fault.hosts
        if fault.kind == "kill":
            self.cluster.kill(hosts[0])
            try:
                time.sleep(fault.seconds)
            finally:
                self.cluster.start(hosts[0])
        elif fault.kind == "bandwidth":
            net.limit(hosts[0], LINK_RATE)
            try:
                time.sleep(fault.seconds)
            finally:
                net.unlimit(hosts[0])
        elif fault.kind == "proxy":
            link = "-".join(hosts)
            mode = {"delay": fault.options["delay_s"], "loss": fault.options["loss"]}
            self.cluster.link_mode(link, mode)
            try:
                time.sleep(fault.seconds)
            finally:
                self.cluster.link_mode(link, None)
        else:
            rules = (
                net.isolate(hosts[0]) if fault.kind == "isolate" else net.cut(*hosts)
            )
            try:
                time.sleep(fault.seconds)
            finally:
                net.heal(rules)

    def whole_again(
        self, fault: ClusterFault | None
    ) -> tuple[float | None, float | None]:
        """When, after ``fault`` ended, a probe event and a probe deployment sent then
        (through the web host the fault touched, if any) had been processed and had
        succeeded: the system served again; and when, besides, every web host was ready,
        every worker host's relay had reported since and its worker answered a ping: the
        system was whole again (None: not within RECOVERY_BOUND)."""
        since, since_wall = time.monotonic(), datetime.now(UTC)
        n = next(self.probes)
        web = next((h for h in (fault.hosts if fault else []) if h in WEBS), None)
        base = self.cluster.base(web) if web else None
        event = chaos_event(f"probe-{n:04d}", 1, "created")
        key = f"chaos-probe-{n:04d}-{secrets.token_hex(4)}"
        self.probe_keys.append(key)
        send_event(self.producer, "event", event, base=base)
        send_deployment(self.producer, key, n, repository=PROBE_REPOSITORY, base=base)
        served = None
        while time.monotonic() < since + RECOVERY_BOUND:
            if served is None and self._probe_done(event["event_id"], key):
                served = time.monotonic()
            if served is not None and self._hosts_whole(since_wall):
                return served, time.monotonic()
            time.sleep(0.2)
        return served, None

    @staticmethod
    def _probe_done(event_id: str, key: str) -> bool:
        from django.apps import apps
        from django.db import close_old_connections

        inbox = apps.get_model("webhooks", "InboxEvent")
        deployment = apps.get_model("deployments", "Deployment")
        close_old_connections()
        try:
            return (
                inbox.objects.filter(
                    source__slug=SOURCE,
                    event_id=event_id,
                    processing_status="processed",
                ).exists()
                and deployment.objects.filter(
                    idempotency_key=key, status="succeeded"
                ).exists()
            )
        except Exception:  # the database may still be coming back
            return False

    def _hosts_whole(self, since: datetime) -> bool:
        from django.apps import apps

        from config.celery_app import app

        heartbeat = apps.get_model("core", "RelayHeartbeat")
        try:
            relays = set(
                heartbeat.objects.filter(last_seen_at__gte=since).values_list(
                    "relay_id", flat=True
                )
            )
        except Exception:
            return False
        machine = socket.gethostname()
        for worker in WORKERS:
            if f"{machine}:{self.cluster.worker_pid(worker)}" not in relays:
                return False
        for base in self.cluster.bases:
            try:
                if requests.get(f"{base}/readyz", timeout=3).status_code != 200:
                    return False
            except requests.RequestException:
                return False
        names = [f"{worker}@{machine}" for worker in WORKERS]
        try:
            answered = app.control.ping(destination=names, timeout=1.0)
        except Exception:
            return False
        return {name for reply in answered for name in reply} == set(names)


def cluster_answers(
    faults: list[ClusterFault], webs: dict[str, str]
) -> Callable[[Run], list[str]]:
    """The answers the contract allows across hosts: a 503 (with ``Retry-After``) only while
    a fault impaired some host's way to the database (``ClusterFault.impairs_database``), no
    answer only where a fault cut the way to the web host, and never an answer later than
    ANSWER_BOUND. ``webs``: each web host's name by its base URL."""

    def rule(run: Run) -> list[str]:
        violations = []
        for outcome in run.outcomes:
            web = webs.get(outcome.host, outcome.host)
            sender = "receiver" if outcome.kind == "status_sync" else "load"
            around = [f for f in faults if f.overlaps(outcome)]
            cut = any(f.unreachable(web, sender) for f in around)
            elapsed = outcome.at - outcome.sent
            what = f"{outcome.kind} {outcome.key} to {web}"
            if outcome.status is None:
                if not cut:
                    violations.append(f"{what}: no answer ({elapsed:.1f} s)")
                continue
            if elapsed > ANSWER_BOUND and not cut:
                violations.append(
                    f"{what}: HTTP {outcome.status} after {elapsed:.1f} s, "
                    f"past {ANSWER_BOUND:g} s"
                )
            if outcome.status < 500:
                continue
            if outcome.status != 503 or not any(
                f.impairs_database() or f.unreachable(web, sender) for f in around
            ):
                violations.append(f"{what}: HTTP {outcome.status}")
            elif not (outcome.retry_after or "").isdigit():
                violations.append(f"{what}: 503 without a Retry-After in seconds")
        return violations

    return rule


def checkpoint_fetch(bases: list[str]) -> str | None:
    """The latest signed checkpoint, from whichever web host answers."""
    for base in bases:
        with contextlib.suppress(requests.RequestException):
            response = requests.get(f"{base}/audit/checkpoint", timeout=5)
            if response.status_code == 200:
                return response.text
    return None


def checkpoint_size(note: str | None) -> int:
    """A checkpoint's tree size (its second line, C2SP's checkpoint format)."""
    lines = (note or "").splitlines()
    return int(lines[1]) if len(lines) > 1 and lines[1].isdigit() else 0


class FirstCheckpoint(threading.Thread):
    """Keeps the first checkpoint of the run that logs something, as an auditor would."""

    def __init__(self, bases: list[str]):
        super().__init__(daemon=True)
        self.bases = bases
        self.note: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            note = checkpoint_fetch(self.bases)
            if checkpoint_size(note) > 0:
                self.note = note
                return
            self.done.wait(1)


def audit_check(
    cluster: Cluster, first: str | None, folder: Path
) -> tuple[list[str], dict]:
    """``audit_verify`` with the first checkpoint and the last (fetched once the rows of
    the run's end had time to be sealed): the log verifies and extends both."""
    interval = float(CLUSTER_TUNABLES["AUDIT_SEAL_INTERVAL_SECONDS"])
    horizon = float(CLUSTER_TUNABLES["AUDIT_SEAL_HORIZON_SECONDS"])
    time.sleep(horizon + 2 * interval)
    last = checkpoint_fetch(cluster.bases)
    figures = {
        "audit_first_checkpoint": checkpoint_size(first),
        "audit_last_checkpoint": checkpoint_size(last),
    }
    if first is None or last is None:
        return [f"no checkpoint to verify: first {first!r}, last {last!r}"], figures
    violations = []
    if checkpoint_size(last) <= checkpoint_size(first):
        violations.append(
            f"the last checkpoint ({checkpoint_size(last)}) does not extend the first "
            f"({checkpoint_size(first)})"
        )
    kept = []
    for name, note in (("first", first), ("last", last)):
        path = folder / f"checkpoint-{name}"
        path.write_text(note)
        kept += ["--since", str(path)]
    try:
        output = manage("audit_verify", *kept, env=stack_env(**cluster.env()))
        figures["audit_verify"] = output.strip().splitlines()[-1]
    except RuntimeError as exc:
        violations.append(f"audit_verify failed: {exc}")
        figures["audit_verify"] = "FAILED"
    return violations, figures


def exercise(
    cluster: Cluster,
    run: Run,
    faults: list[ClusterFault],
    size: dict,
    seed: int,
    receivers: tuple[ChaosReceiver, ChaosReceiver],
) -> tuple[list[str], dict]:
    """The load and the faults at once, then every check."""
    producer = Producer(cluster.bases, run, timeout=PRODUCER_TIMEOUT)
    injector = Injector(cluster, producer, run)
    started = time.monotonic()
    baseline_end = injector.whole_again(None)[1]
    if baseline_end is None:
        raise RuntimeError("the cluster never became whole before its first fault")
    first = FirstCheckpoint(cluster.bases)
    first.start()

    def schedule() -> None:
        for fault in faults:
            time.sleep(GAP_SECONDS)
            injector.inject(fault)

    duration = sum(f.seconds + 10 + GAP_SECONDS for f in faults)
    injecting = threading.Thread(target=schedule, daemon=True)
    injecting.start()
    planned = load(producer, {**size, "duration": duration}, random.Random(seed))
    injecting.join()
    print("[cluster] load and faults done; waiting for recovery", flush=True)
    planned["deployment_keys"] += injector.probe_keys
    webs = {cluster.base(web): web for web in WEBS}
    chaos_receiver, probe_receiver = receivers
    violations, figures = recovered_check(
        run, planned, chaos_receiver.receiver, answers=cluster_answers(faults, webs)
    )
    probed, probe_figures = receiver_check(probe_receiver.receiver, PROBE_REPOSITORY)
    violations += probed
    figures["probe_jobs_checked"] = probe_figures["trigger_jobs_checked"]
    figures["triggered_twice"] += probe_figures["triggered_twice"]
    violations += [
        f"{f.name}: not whole {RECOVERY_BOUND:g} s after it ended"
        for f in faults
        if f.recovery is None
    ]
    for fault in faults:
        fault.answers_record(run, webs)
    first.done.set()
    audited, audit_figures = audit_check(cluster, first.note, cluster.root)
    violations += audited
    figures.update(audit_figures)
    # A probe's way through the cluster with no fault: what every recovery time includes.
    figures["baseline_whole_s"] = round(baseline_end - started, 2)
    figures.update(answer_figures(run, faults, webs))
    figures["violations"] = len(violations)
    return violations, figures


def answer_figures(run: Run, faults: list[ClusterFault], webs: dict[str, str]) -> dict:
    """The slowest answer and the slowest 503, and the three slowest answers with the fault
    each came under (or after, within GRACE)."""
    answered = sorted(
        (o for o in run.outcomes if o.status is not None),
        key=lambda o: o.at - o.sent,
        reverse=True,
    )
    unavailable = [o.at - o.sent for o in answered if o.status == 503]
    return {
        "slowest_answer_s": round(answered[0].at - answered[0].sent, 2)
        if answered
        else 0.0,
        "slowest_503_s": round(max(unavailable, default=0.0), 2),
        "slowest_answers": [
            {
                "kind": o.kind,
                "web": webs.get(o.host, o.host),
                "status": o.status,
                "seconds": round(o.at - o.sent, 2),
                "fault": next((f.name for f in faults if f.overlaps(o)), ""),
            }
            for o in answered[:3]
        ],
        "no_answer": sum(1 for o in run.outcomes if o.status is None),
    }


def table_print(faults: list[ClusterFault], figures: dict) -> None:
    header = (
        f"{'#':>2}  {'fault':<14} {'hosts':<17} {'lasted':>7} {'served':>7} "
        f"{'whole':>7}  answers until whole (per web host)"
    )
    print(header)
    print("-" * len(header))
    for n, fault in enumerate(faults, 1):
        hosts = ", ".join(fault.hosts)
        answers = "; ".join(
            f"{web} {counts}" if web != "slowest_s" else f"slowest {counts} s"
            for web, counts in fault.answers.items()
        )
        print(
            f"{n:>2}  {fault.kind:<14} {hosts:<17} "
            f"{seconds(fault.healed - fault.start):>7} {seconds(fault.serving):>7} "
            f"{seconds(fault.recovery):>7}  {answers}"
        )
    print()
    by_kind = defaultdict(list)
    for fault in faults:
        by_kind[fault.kind].append(fault)
    for kind, done in by_kind.items():
        served = [f.serving for f in done if f.serving is not None]
        whole = [f.recovery for f in done if f.recovery is not None]
        print(
            f"{kind:<14} served again after {statistics.median(served or [0]):.1f} s, "
            f"whole again after {statistics.median(whole or [0]):.1f} s (median of "
            f"{len(whole)} of {len(done)}; max {max(whole, default=0):.1f} s): {KINDS[kind]}"
        )
    print()
    for name, key in (
        ("requests", "requests"),
        ("faults", "faults_injected"),
        ("events", "events_checked"),
        ("jobs", "deployments_checked"),
        ("violations", "violations"),
    ):
        print(f"{name:<11} {figures.get(key)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--subnet", type=ipaddress.IPv4Network, default=None)
    parser.add_argument("--result", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    unusable = netns.usable()
    if unusable:
        print(f"chaos.cluster: {unusable}", file=sys.stderr)
        return 2
    size = SIZES[args.size]
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    removed = netns.stale_cleanup()
    if removed:
        print(f"[cluster] removed what runs that ended uncleanly left: {removed}")
    net = netns.Network(
        os.getpid(),
        netns.subnet_choose(os.getpid(), args.subnet),
        {name: octet for name, (_, octet) in HOSTS.items()},
    )
    faults = fault_plan(random.Random(seed), size)
    print(f"[cluster] size={args.size} seed={seed} subnet={net.subnet}", flush=True)
    for n, fault in enumerate(faults, 1):
        print(f"[cluster]   {n:>2}. {fault.name}, {fault.seconds:.1f} s", flush=True)

    # A terminated run still tears its hosts down (the finally below); Ctrl-C too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(tempfile.mkdtemp(prefix="chaos-cluster-"))
    root.chmod(0o755)
    cluster = Cluster(net, root, seed)
    run = Run()
    try:
        net.build()
        cluster.start("db", first=True)
        cluster.start("broker")
        for host in ("db", "broker"):
            cluster.ready(host)
        stack_prepare(cluster.env())
        with contextlib.ExitStack() as stack:
            reporter = Producer(cluster.bases, run, timeout=PRODUCER_TIMEOUT)
            address = net.address("receiver")
            # The receivers' threads, and the sockets they make, are the receiver host's.
            with netns.thread_inside(net.ns("receiver")):
                receivers = (
                    stack.enter_context(
                        ChaosReceiver(
                            reporter,
                            random.Random(seed + 1),
                            host=address,
                            port=RECEIVER_PORT,
                        )
                    ),
                    stack.enter_context(
                        ChaosReceiver(
                            reporter,
                            random.Random(seed + 2),
                            faults=[(None, 1)],
                            report_after=0.1,
                            host=address,
                            port=PROBE_RECEIVER_PORT,
                        )
                    ),
                )
            for receiver, name, repository in zip(
                receivers,
                ("chaos-receiver", "chaos-probe"),
                (TRIGGERED_REPOSITORY, PROBE_REPOSITORY),
                strict=True,
            ):
                trigger_target_create(
                    receiver.receiver.url,
                    receiver.receiver.secret,
                    name=name,
                    repository=repository,
                )
            for host in (*WEBS, *WORKERS):
                cluster.start(host)
            for host in WEBS:
                cluster.ready(host)
            violations, figures = exercise(cluster, run, faults, size, seed, receivers)
        figures.update(
            {
                "seed": seed,
                "size": args.size,
                "cluster": True,
                "subnet": str(net.subnet),
                "hosts": [
                    {"name": "load", "role": "load", "address": net.load_address},
                    *(
                        {"name": name, "role": role, "address": net.address(name)}
                        for name, (role, _) in HOSTS.items()
                    ),
                ],
                "fault_details": [fault.as_dict() for fault in faults],
            }
        )
        if violations:
            shutil.copy(cluster.pg.dir / "server.log", cluster.logs / "db-postgres.log")
            logs_keep(cluster.logs)
    finally:
        cluster.stop()
        net.teardown()
        shutil.rmtree(root, ignore_errors=True)
    status = result_write(figures, violations, args.result)
    table_print(faults, figures)
    return status


if __name__ == "__main__":
    sys.exit(main())
