"""``make chaos``: a mixed load while workers are killed, the broker and the database restart,
beat stops and two sweeps run at once; then every invariant the product promises is checked.

Runs on a private PostgreSQL and Redis (chaos.services), with the product's real processes:
gunicorn, two Celery workers (each with its relay), a relay apart (``manage.py relay``) and
beat. Half the deployments are routed by a deploy target to a CI/CD receiver in this process
(tests/deployments/receiver.py) that fails at random (503, 500, 429, a dropped connection, an
answer after the timeout) and reports each job it takes through ``/api/status-sync/``; it
counts, per ``webhook-id``, the requests it acted on. Prints the figures and exits non-zero on
any violation.

    python -m chaos.run [--size small|medium|large]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests

from bench.harness import ROOT, BenchContext, manage, stack_env
from chaos.services import PrivatePostgres, PrivateRedis
from tests.deployments.receiver import Fault, Receiver
from tests.integrations.research.factories import instant, research_event
from webhooks.schemes import signature_headers

SOURCE = "chaos"
SECRET = "chaos-webhook-secret-0123456789"  # noqa: S105 - a private, throwaway server's secret
TOKEN = "chaos-api-token-0123456789abcdef"  # noqa: S105

SIZES = {
    # entities x versions events, each delivered 1-3 times, plus noise and deployments.
    "small": {"entities": 12, "versions": 5, "deployments": 15, "duration": 40},
    "medium": {"entities": 40, "versions": 8, "deployments": 60, "duration": 90},
    "large": {"entities": 150, "versions": 10, "deployments": 200, "duration": 240},
}

# Fast sweeps and retries, so that recovery is observed within the run.
TUNABLES = {
    "RELAY_SWEEP_INTERVAL_SECONDS": "2",
    "INBOX_REDISPATCH_AFTER_SECONDS": "3",
    "INBOX_PROCESSING_LEASE_SECONDS": "8",
    "INBOX_RETRY_BASE_SECONDS": "0.5",
    "INBOX_RETRY_MAX_SECONDS": "4",
    "INBOX_MAX_ATTEMPTS": "50",
    "DEPLOY_REDISPATCH_AFTER_SECONDS": "3",
    "DEPLOY_SIMULATED_SECONDS": "0.3",
    "DEPLOY_RUNNING_LEASE_SECONDS": "10",
    "DEPLOY_HTTP_TIMEOUT_SECONDS": "1",
    "DEPLOY_TRIGGER_RETRY_BASE_SECONDS": "0.2",
    "DEPLOY_TRIGGER_RETRY_MAX_SECONDS": "2",
    "DEPLOY_TRIGGER_MAX_ATTEMPTS": "40",
    # A deploy target's breaker opens after 3 failures in a row and probes every 2 s.
    "DEPLOY_TARGET_BREAKER_FAILURES": "3",
    "DEPLOY_TARGET_BREAKER_COOLDOWN_SECONDS": "2",
    "DEPLOY_TARGET_WAIT_SECONDS": "0.5",
    # Each worker's metrics on a port of its own (two workers run on one machine).
    "CELERY_METRICS_PORT": "0",
    "CELERY_BROKER_CONNECTION_TIMEOUT": "1",
    "LOG_LEVEL": "WARNING",
}


# The deployments of this repository go to the failing receiver (a deploy target); the others
# run the default executor (simulated).
TRIGGERED_REPOSITORY = "acme/chaos-http"
# The deployments of this repository go to a receiver that refuses every request (503) for
# the first half of the run, then serves: its target's breaker must open, hold the jobs, and
# let them go once a probe is answered, none triggered twice.
DOWN_REPOSITORY = "acme/chaos-down"
DOWN_SHARE = 0.5
# What a request meets, at random: (fault, weight). None: served normally.
TRIGGER_FAULTS = [
    (None, 50),
    (Fault.status(503), 15),
    (Fault.status(500), 10),
    (Fault.status(429, retry_after=1), 5),
    (Fault.drop(), 10),  # acted on, then no answer
    (Fault.slow(1.5), 10),  # acted on, answered after DEPLOY_HTTP_TIMEOUT_SECONDS
]


@dataclass
class Outcome:
    kind: str  # event | duplicate | inconsistent | invalid | deployment | status_sync
    key: str
    status: int | None  # None: no HTTP answer at all (connection refused/reset)
    at: float  # when the answer came (or the attempt failed), time.monotonic()
    host: str = ""  # the base URL the request was sent to
    sent: float = 0.0  # when it was sent
    retry_after: str | None = None  # the answer's Retry-After


@dataclass
class Run:
    outcomes: list[Outcome] = field(default_factory=list)
    faults: list[tuple[str, float, float]] = field(
        default_factory=list
    )  # name, start, end
    db_outages: list[tuple[float, float]] = field(default_factory=list)
    scheduled: list[str] = field(
        default_factory=list
    )  # the kind of each fault scheduled
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)


def chaos_event(entity: str, version: int, kind: str) -> dict:
    """Version ``version`` of document ``entity``; its id names both, for the checks."""
    return research_event(
        event_id=f"{entity}-v{version}",
        event_type=f"research.document.{kind}",
        entity_id=entity,
        source_version=version,
        occurred_at=datetime.now(UTC) + timedelta(seconds=version),
        producer="chaos",
        delivery_attempt=1,
    )


def signed_headers(body: bytes, event_id: str, *, valid: bool = True) -> dict[str, str]:
    headers = signature_headers(
        scheme="hmac-sha256",
        secret=SECRET if valid else "not-the-secret",
        raw_body=body,
        event_id=event_id,
        timestamp=int(time.time()),
    )
    return {"Content-Type": "application/json", **headers}


class Producer:
    """Sends like a real producer: retries on no answer and on 503, as webhooks senders do.
    With several base URLs (web servers behind a load balancer), each request starts at the
    next one and each retry goes to the one after."""

    def __init__(
        self,
        base: str | list[str],
        run: Run,
        *,
        timeout: float | tuple[float, float] = 15,
    ):
        self.bases = [base] if isinstance(base, str) else list(base)
        self.run = run
        self.timeout = timeout
        self.turns = itertools.count()
        self.http = threading.local()

    def _session(self) -> requests.Session:
        if not hasattr(self.http, "session"):
            self.http.session = requests.Session()
        return self.http.session

    def post(
        self, kind: str, key: str, path: str, make_request, *, base: str | None = None
    ) -> int | None:
        """Sends until answered other than 503; ``base``: to that server only."""
        status = None
        first = next(self.turns)
        for attempt in range(30):
            host = base or self.bases[(first + attempt) % len(self.bases)]
            body, headers = make_request()
            sent, retry_after = time.monotonic(), None
            try:
                response = self._session().post(
                    host + path, data=body, headers=headers, timeout=self.timeout
                )
                status = response.status_code
                retry_after = response.headers.get("Retry-After")
            except requests.RequestException:
                status = None
                self.http.session = requests.Session()
            self.run.record(
                Outcome(kind, key, status, time.monotonic(), host, sent, retry_after)
            )
            if status is not None and status != 503:
                return status
            time.sleep(min(2.0, 0.2 * (attempt + 1)))
        return status


def plan_events(size: dict, rng: random.Random) -> list[tuple[str, dict]]:
    plan: list[tuple[str, dict]] = []
    for n in range(size["entities"]):
        entity = f"doc-{n:04d}"
        delete_at = rng.choice([None, None, rng.randint(2, size["versions"])])
        for version in range(1, size["versions"] + 1):
            kind = "created" if version == 1 else "updated"
            if version == delete_at:
                kind = "deleted"
            plan.append(("event", chaos_event(entity, version, kind)))
    # Deliveries arrive in any order, and 1-3 times each.
    deliveries = []
    for kind, event in plan:
        deliveries.append((kind, event))
        for _ in range(rng.choice([0, 0, 1, 2])):
            deliveries.append(("duplicate", event))
    rng.shuffle(deliveries)
    # Noise: inconsistent duplicates and invalid signatures.
    noise = []
    for _, event in rng.sample(plan, max(1, len(plan) // 10)):
        changed = dict(event, producer="chaos-conflict")
        noise.append(("inconsistent", changed))
    for _, event in rng.sample(plan, max(1, len(plan) // 10)):
        noise.append(("invalid", event))
    for item in noise:
        deliveries.insert(rng.randrange(len(deliveries) + 1), item)
    return deliveries


def send_event(
    producer: Producer, kind: str, event: dict, *, base: str | None = None
) -> None:
    def make():
        body_event = dict(event)
        if kind == "duplicate":
            body_event["delivered_at"] = instant(datetime.now(UTC))
            body_event["delivery_attempt"] = 2
        body = json.dumps(body_event).encode()
        return body, signed_headers(body, event["event_id"], valid=kind != "invalid")

    producer.post(kind, event["event_id"], f"/webhooks/{SOURCE}/", make, base=base)


def _repository_of(n: int) -> str:
    """Half the deployments to the receiver failing at random, a quarter to the one that is
    down for a while, a quarter to the default executor."""
    if n % 2:
        return TRIGGERED_REPOSITORY
    return DOWN_REPOSITORY if n % 4 == 2 else "acme/chaos"


def send_deployment(
    producer: Producer,
    key: str,
    n: int,
    *,
    repository: str | None = None,
    base: str | None = None,
) -> None:
    payload = {
        "repository": repository or _repository_of(n),
        "commit_sha": hashlib.sha1(key.encode()).hexdigest()[:12],  # noqa: S324 - an id
        "environment": "staging",
        "workflow": "deploy.yml",
        "triggered_by": f"chaos-{n}",
    }

    def make():
        return json.dumps(payload).encode(), {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {TOKEN}",
            "Idempotency-Key": key,
        }

    producer.post("deployment", key, "/api/deployments/", make, base=base)


def load(producer: Producer, size: dict, rng: random.Random, threads: int = 4) -> dict:
    """The planned deliveries and deployment requests, sent by ``threads`` producers over
    about 0.8 of ``size["duration"]``."""
    deliveries = plan_events(size, rng)
    keys = [f"chaos-key-{uuid.uuid4().hex[:12]}" for _ in range(size["deployments"])]
    work: list = [("webhook", kind, event) for kind, event in deliveries]
    for n, key in enumerate(keys):
        for _ in range(rng.choice([1, 2, 3])):
            work.insert(rng.randrange(len(work) + 1), ("deployment", key, n))
    pace = size["duration"] * 0.8 / max(1, len(work)) * threads
    lock = threading.Lock()

    def sender():
        while True:
            with lock:
                if not work:
                    return
                item = work.pop(0)
            if item[0] == "webhook":
                send_event(producer, item[1], item[2])
            else:
                send_deployment(producer, item[1], item[2])
            time.sleep(pace * rng.random() * 2)

    pool = [threading.Thread(target=sender, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return {"deliveries": len(deliveries), "deployment_keys": keys}


class ChaosReceiver:
    """The CI/CD system of the triggered deployments: fails at random (``faults``, weighted),
    and reports each job it takes (acted on, or a duplicate it answered) as succeeded
    ``report_after`` seconds later, through the product's API, as a CD system that
    deduplicates on ``webhook-id`` would. ``receiver_options``: the Receiver's (where it
    listens)."""

    def __init__(
        self,
        producer: Producer,
        rng: random.Random,
        *,
        faults: list = TRIGGER_FAULTS,
        report_after: float = 1.5,
        **receiver_options,
    ) -> None:
        self.producer = producer
        self.rng = rng
        self.faults = faults
        self.report_after = report_after
        self.rng_lock = threading.Lock()
        self.receiver = Receiver(**receiver_options)
        self.receiver.fault_for = self._fault
        self.receiver.on_taken = self._report_later
        self.reports = itertools.count()
        self.turns = itertools.count()

    def __enter__(self) -> ChaosReceiver:
        self.receiver.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.receiver.__exit__(*exc)

    def _fault(self, webhook_id: str) -> Fault | None:
        """The first requests meet each fault once, in turn (so that every kind happens in
        any run); the rest, faults at random."""
        faults, weights = zip(*self.faults, strict=True)
        with self.rng_lock:
            turn = next(self.turns)
            if turn < len(faults) - 1:
                return faults[turn + 1]
            return self.rng.choices(faults, weights)[0]

    def _report_later(self, webhook_id: str) -> None:
        key = f"chaos-sync-{webhook_id}-{next(self.reports)}"

        def report() -> None:
            time.sleep(self.report_after)  # the deployment downstream takes a moment

            def make():
                body = {
                    "deployment_id": webhook_id,
                    "status": "succeeded",
                    "reported_at": datetime.now(UTC).isoformat(),
                    "detail": "deployed by the chaos receiver",
                }
                return json.dumps(body).encode(), {
                    "Content-Type": "application/json",
                    "Authorization": f"Bearer {TOKEN}",
                    "Idempotency-Key": key,
                }

            self.producer.post("status_sync", key, "/api/status-sync/", make)

        threading.Thread(target=report, daemon=True).start()


def trigger_target_create(
    url: str,
    secret: str,
    *,
    name: str = "chaos-receiver",
    repository: str = TRIGGERED_REPOSITORY,
) -> None:
    """The deploy target that routes ``repository`` to the receiver at ``url``."""
    from core.actors import Actor
    from deployments.models import DeployTarget
    from deployments.targets import deploy_target_save

    target = DeployTarget(
        name=name,
        repository_pattern=repository,
        executor="http",
        url=url,
    )
    deploy_target_save(target=target, secret=secret, actor=Actor.command())


class Faults:
    def __init__(
        self,
        ctx: BenchContext,
        pg: PrivatePostgres,
        redis: PrivateRedis,
        env: dict,
        run: Run,
    ):
        self.ctx, self.pg, self.redis, self.env, self.run = ctx, pg, redis, env, run
        self.workers: dict[str, object] = {}
        self.beat = None
        self.relay = None

    def start_worker(self, name: str) -> None:
        self.workers[name] = self.ctx.celery_worker(
            concurrency=1, name=name, **self.env
        )

    def start_relay(self) -> None:
        # A relay apart from the workers' own, so that one can be killed alone.
        self.relay = self.ctx.relay(**self.env)

    def kill_relay(self) -> None:
        def action():
            self.relay.kill()
            self.ctx.processes.remove(self.relay)
            time.sleep(1)
            self.start_relay()

        self._timed("kill -9 relay", action)

    def _timed(self, name: str, action) -> None:
        start = time.monotonic()
        action()
        self.run.faults.append((name, start, time.monotonic()))

    def kill_worker(self, name: str) -> None:
        def action():
            self.workers[name].kill()
            self.ctx.processes.remove(self.workers[name])
            time.sleep(1)
            self.start_worker(name)

        self._timed(f"kill -9 worker {name}", action)

    def restart_redis(self) -> None:
        self._timed("restart Redis", self.redis.restart)

    def restart_postgres(self) -> None:
        start = time.monotonic()
        self._timed("restart PostgreSQL", self.pg.restart)
        self.run.db_outages.append((start, time.monotonic()))

    def stop_beat(self, seconds: float) -> None:
        def action():
            self.ctx.stop(self.beat)
            time.sleep(seconds)
            self.beat = self.ctx.celery_beat(**self.env)

        self._timed("beat stopped", action)

    def concurrent_sweeps(self) -> None:
        # Two relay rounds with their sweep, at once, beside the workers' own relays.
        code = "from core.relay.loop import Relay; print(Relay().run_once(sweep=True))"
        env = stack_env(**self.env)

        def action():
            procs = [
                subprocess.Popen(
                    [sys.executable, "manage.py", "shell", "-c", code],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                for _ in range(2)
            ]
            for proc in procs:
                proc.communicate(timeout=120)

        self._timed("two sweeps at once", action)

    def schedule(self, duration: float) -> None:
        # (when, kind, action): each injected fault's name starts with its kind.
        steps = [
            (0.10, "kill -9 worker", lambda: self.kill_worker("w1")),
            (0.16, "kill -9 relay", self.kill_relay),
            (0.22, "restart Redis", self.restart_redis),
            (0.35, "kill -9 worker", lambda: self.kill_worker("w2")),
            (0.45, "restart PostgreSQL", self.restart_postgres),
            (0.55, "beat stopped", lambda: self.stop_beat(duration * 0.12)),
            (0.60, "two sweeps at once", self.concurrent_sweeps),
            (0.68, "kill -9 relay", self.kill_relay),
            (0.75, "kill -9 worker", lambda: self.kill_worker("w1")),
            (0.82, "two sweeps at once", self.concurrent_sweeps),
        ]
        start = time.monotonic()
        for at, kind, action in steps:
            delay = start + at * duration - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.run.scheduled.append(kind)
            try:
                action()
            except Exception as exc:  # a fault that could not be injected is reported
                self.run.faults.append(
                    (f"FAILED to inject {kind}: {exc!r}", time.monotonic(), 0)
                )


def _django_setup(env: dict) -> None:
    os.environ.update(stack_env(**env))
    import django

    django.setup()


def wait_recovered(timeout: float) -> dict:
    from django.apps import apps
    from django.db import close_old_connections

    inbox = apps.get_model("webhooks", "InboxEvent")
    deployment = apps.get_model("deployments", "Deployment")
    terminal_inbox = [
        "processed",
        "ignored_out_of_order",
        "ignored_duplicate_version",
        "ignored_unsupported",
        "dead_lettered",
    ]
    deadline = time.monotonic() + timeout
    pending: dict = {}
    while time.monotonic() < deadline:
        close_old_connections()
        try:
            pending = {
                "inbox": inbox.objects.exclude(
                    processing_status__in=terminal_inbox
                ).count(),
                "deployments": deployment.objects.exclude(
                    status__in=["succeeded", "failed"]
                ).count(),
            }
        except Exception as exc:  # the database may still be coming back
            pending = {"error": repr(exc)}
        if pending.get("inbox") == 0 and pending.get("deployments") == 0:
            return pending
    try:
        pending["stuck_deployments"] = list(
            deployment.objects.exclude(status__in=["succeeded", "failed"]).values(
                "public_id",
                "status",
                "claimed_by",
                "lease_expires_at",
                "last_dispatched_at",
                "executor_started_at",
                "detail",
            )[:10]
        )
        pending["stuck_inbox"] = list(
            inbox.objects.exclude(processing_status__in=terminal_inbox).values(
                "event_id",
                "processing_status",
                "attempts",
                "next_attempt_at",
                "lease_expires_at",
                "dispatched_at",
                "error_message",
            )[:10]
        )
    except Exception as exc:
        pending["detail_error"] = repr(exc)
        time.sleep(1)
    return pending


def outage_answers(run: Run) -> list[str]:
    """5xx: only 503 during (and shortly after) a database outage is documented."""
    violations = []
    grace = 10.0
    for outcome in run.outcomes:
        if outcome.status is None or outcome.status >= 500:
            in_outage = any(s - 1 <= outcome.at <= e + grace for s, e in run.db_outages)
            if not (outcome.status == 503 and in_outage):
                violations.append(
                    f"{outcome.kind} {outcome.key}: HTTP {outcome.status}"
                )
    return violations


def check(
    run: Run,
    planned: dict,
    receiver: Receiver,
    *,
    answers: Callable[[Run], list[str]] = outage_answers,
    down_receiver: Receiver | None = None,
) -> tuple[list[str], dict]:
    """Every invariant, from the database and the receivers; ``answers``: the rule the HTTP
    answers the producers got are held to; ``down_receiver``: the one that refused every
    request for a while (its target's breaker checked too)."""
    from django.apps import apps

    inbox = apps.get_model("webhooks", "InboxEvent")
    document = apps.get_model("research", "ResearchDocument")
    revision = apps.get_model("research", "DocumentRevision")
    deployment = apps.get_model("deployments", "Deployment")
    violations: list[str] = answers(run)

    # Nothing lost: every event a producer saw accepted is in the inbox, terminal.
    accepted = {
        o.key
        for o in run.outcomes
        # Whichever delivery of an id came first, even the "inconsistent" one, is the event.
        if o.kind in ("event", "duplicate", "inconsistent") and o.status in (200, 202)
    }
    rows = dict(
        inbox.objects.filter(source__slug=SOURCE).values_list(
            "event_id", "processing_status"
        )
    )
    for event_id in accepted:
        if event_id not in rows:
            violations.append(f"accepted event {event_id} is not in the inbox")
        elif rows[event_id] in ("received", "processing", "failed"):
            violations.append(f"event {event_id} still {rows[event_id]}")
        elif rows[event_id] == "dead_lettered":
            violations.append(f"event {event_id} dead-lettered")
    # Refused (401), or not answered for now while the database is away (503: the secrets
    # are in the database, so nothing can be verified; the 5xx rule above says when a 503 is
    # allowed). Anything else took an unsigned delivery.
    unsigned = [
        o.key
        for o in run.outcomes
        if o.kind == "invalid" and o.status is not None and o.status not in (401, 503)
    ]
    violations += [f"unsigned delivery of {key} was not refused" for key in unsigned]

    # No event applied twice; revisions strictly increasing; no document behind its maximum.
    applied = Counter(revision.objects.values_list("event_id", flat=True))
    violations += [f"event {e} applied {n} times" for e, n in applied.items() if n > 1]
    versions: dict[str, list[int]] = defaultdict(list)
    for entity, version in revision.objects.order_by("id").values_list(
        "document__entity_id", "source_version"
    ):
        versions[entity].append(version)
    expected_max: dict[str, int] = defaultdict(int)
    for event_id in accepted:
        entity, _, version = event_id.rpartition("-v")
        expected_max[entity] = max(expected_max[entity], int(version))
    documents = dict(
        document.objects.values_list("entity_id", "current_source_version")
    )
    for entity, top in expected_max.items():
        if documents.get(entity) != top:
            got = documents.get(entity)
            seen = [
                (o.kind, o.status)
                for o in run.outcomes
                if o.key == f"{entity}-v{got}" or o.key == f"{entity}-v{top}"
            ]
            violations.append(
                f"{entity} at version {got}, expected {top}; deliveries: {seen}"
            )
        seq = versions.get(entity, [])
        if any(b <= a for a, b in itertools.pairwise(seq)):
            violations.append(f"{entity} revisions not strictly increasing: {seq}")

    # One deployment per key; none executed twice.
    per_key = Counter(deployment.objects.values_list("idempotency_key", flat=True))
    for key in planned["deployment_keys"]:
        if per_key.get(key, 0) != 1:
            violations.append(
                f"deployment key {key}: {per_key.get(key, 0)} deployments"
            )
    executions = deployment_execution_counts()
    violations += [
        f"deployment {d} executed {n} times" for d, n in executions.items() if n > 1
    ]

    downstream, triggered_figures = receiver_check(receiver, TRIGGERED_REPOSITORY)
    violations += downstream
    if down_receiver is not None:
        down, down_figures = receiver_check(down_receiver, DOWN_REPOSITORY)
        violations += down + breaker_check(DOWN_TARGET)
        triggered_figures["triggered_twice"] += down_figures["triggered_twice"]
        triggered_figures["down_target"] = {
            "jobs": down_figures["trigger_jobs_checked"],
            "requests": down_figures["trigger_requests"],
            "statuses": down_figures["trigger_statuses"],
            "breaker": breaker_changes(DOWN_TARGET),
        }

    figures = {
        "requests": len(run.outcomes),
        "http_statuses": dict(Counter(str(o.status) for o in run.outcomes)),
        "faults_injected": len(run.faults),
        "faults": [name for name, _, _ in run.faults],
        "faults_scheduled": run.scheduled,
        "events_checked": len(accepted),
        # Where every accepted event ended: "missing" if it is not in the inbox.
        "accepted_statuses": dict(Counter(rows.get(e, "missing") for e in accepted)),
        "documents_checked": len(expected_max),
        "revisions": sum(applied.values()),
        "deployments_checked": len(planned["deployment_keys"]),
        **triggered_figures,
        "violations": len(violations),
    }
    return violations, figures


def receiver_check(receiver: Receiver, repository: str) -> tuple[list[str], dict]:
    """Zero jobs triggered twice: the receiver acted on each webhook-id at most once, every
    request it got verified, and each triggered job of ``repository`` that succeeded was
    acted on."""
    from django.apps import apps

    deployment = apps.get_model("deployments", "Deployment")
    violations: list[str] = []
    with receiver.lock:
        acted = dict(receiver.acted)
        requests_seen = list(receiver.received)
    violations += [
        f"deployment {webhook_id} triggered {n} times downstream"
        for webhook_id, n in acted.items()
        if n > 1
    ]
    violations += [
        f"a trigger of {r.webhook_id} did not verify: {r.error}"
        for r in requests_seen
        if not r.verified
    ]
    triggered = dict(
        deployment.objects.filter(repository=repository).values_list(
            "public_id", "status"
        )
    )
    violations += [
        f"deployment {public_id} succeeded but was never acted on downstream"
        for public_id, status in triggered.items()
        if status == "succeeded" and acted.get(public_id, 0) != 1
    ]
    violations += [
        f"the receiver got {webhook_id}, which is no triggered deployment"
        for webhook_id in acted
        if webhook_id not in triggered
    ]

    return violations, {
        "trigger_jobs_checked": len(triggered),
        "trigger_requests": len(requests_seen),
        "trigger_faults": dict(
            Counter(r.fault.kind if r.fault else "none" for r in requests_seen)
        ),
        "triggered_twice": sum(1 for n in acted.values() if n > 1),
        "trigger_statuses": dict(Counter(triggered.values())),
    }


DOWN_TARGET = "chaos-down"


def breaker_changes(target: str) -> dict[str, int]:
    """How often the target's breaker moved to each state (its operator actions)."""
    from django.apps import apps

    action = apps.get_model("trail", "OperatorAction")
    return dict(
        Counter(
            details["state"]
            for details in action.objects.filter(
                action="set_deploy_target_breaker"
            ).values_list("details", flat=True)
            if details.get("target") == target
        )
    )


def breaker_check(target: str) -> list[str]:
    """A target refusing everything for a while opened its breaker, and a probe closed it
    once it answered again."""
    from django.apps import apps

    model = apps.get_model("deployments", "DeployTarget")
    changed = breaker_changes(target)
    violations = []
    if not changed.get("open"):
        violations.append(f"target {target} refused every request, but never opened")
    state = model.objects.filter(name=target).values_list("breaker_state", flat=True)
    if list(state) != ["closed"]:
        violations.append(f"target {target}'s breaker is {list(state)} at the end")
    return violations


def deployment_execution_counts() -> dict:
    """How many times the executor started for each deployment (from its audit transitions)."""
    from django.apps import apps

    transition = apps.get_model("deployments", "JobTransition")
    return dict(
        Counter(
            transition.objects.filter(to_status="running").values_list(
                "job_id", flat=True
            )
        )
    )


RESULT = ROOT / "var" / "chaos" / "result.json"
# How long the run waits, after its load and faults, for every event and job to end.
RECOVERY_TIMEOUT = 180


def stack_prepare(env: dict[str, str]) -> None:
    """The private database migrated, with the run's webhook source and API client."""
    stack = stack_env(**env)
    manage("migrate", "--noinput", "-v", "0", env=stack)
    manage(
        "webhook_source",
        "create",
        SOURCE,
        "--scheme",
        "hmac-sha256",
        "--handler",
        "research",
        "--secret",
        SECRET,
        env=stack,
    )
    manage("api_client", "create", "chaos", "--token", TOKEN, env=stack)
    _django_setup(env)


def recovered_check(
    run: Run, planned: dict, receiver: Receiver, **options
) -> tuple[list[str], dict]:
    """Waits until every event and job has ended (``RECOVERY_TIMEOUT`` at most), then
    checks every invariant (``check``, with ``options``)."""
    pending = wait_recovered(timeout=RECOVERY_TIMEOUT)
    violations, figures = check(run, planned, receiver, **options)
    # The counts only: the details of what is stuck are in the violation.
    figures["pending_after_recovery"] = {
        k: v for k, v in pending.items() if k in ("inbox", "deployments", "error")
    }
    if pending.get("inbox") or pending.get("deployments") or "error" in pending:
        violations.append(f"not recovered after {RECOVERY_TIMEOUT} s: {pending}")
        figures["violations"] = len(violations)
    return violations, figures


def logs_keep(folder: Path) -> None:
    """The processes' logs, kept in var/chaos/logs for the investigation of a violation."""
    logs = ROOT / "var" / "chaos" / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    shutil.copytree(folder, logs, ignore=shutil.ignore_patterns("*schedule*"))


def result_write(figures: dict, violations: list[str], path: Path = RESULT) -> int:
    """Prints the figures and the violations, writes them to ``path``; the exit status."""
    print(json.dumps(figures, indent=2))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**figures, "violation_list": violations}))
    for violation in violations[:50]:
        print(f"VIOLATION {violation}")
    print(
        f"chaos: {figures['requests']} requests, {figures['faults_injected']} faults, "
        f"{figures['events_checked']} events checked, violations = {len(violations)}"
    )
    return 1 if violations else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"[chaos] size={args.size} seed={seed}", flush=True)

    # A terminated run still stops its processes and servers (the finally blocks below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(tempfile.mkdtemp(prefix="chaos-"))
    pg, redis = PrivatePostgres(root), PrivateRedis(root)
    run = Run()
    try:
        pg.init()
        redis.start()
        env = {"DATABASE_URL": pg.url, "CELERY_BROKER_URL": redis.url, **TUNABLES}
        stack_prepare(env)
        with BenchContext() as ctx, contextlib.ExitStack() as stack:
            base = ctx.gunicorn(workers=2, **env)
            chaos_receiver = stack.enter_context(
                ChaosReceiver(Producer(base, run), random.Random(seed + 1))
            )
            trigger_target_create(
                chaos_receiver.receiver.url, chaos_receiver.receiver.secret
            )
            down = stack.enter_context(
                ChaosReceiver(Producer(base, run), random.Random(seed + 2))
            )
            down_until = time.monotonic() + size["duration"] * DOWN_SHARE
            down.receiver.fault_for = lambda _id: (
                Fault.status(503) if time.monotonic() < down_until else None
            )
            trigger_target_create(
                down.receiver.url,
                down.receiver.secret,
                name=DOWN_TARGET,
                repository=DOWN_REPOSITORY,
            )
            faults = Faults(ctx, pg, redis, env, run)
            faults.start_worker("w1")
            faults.start_worker("w2")
            faults.start_relay()
            faults.beat = ctx.celery_beat(**env)
            injector = threading.Thread(
                target=faults.schedule, args=(size["duration"],), daemon=True
            )
            injector.start()
            planned = load(Producer(base, run), size, rng)
            injector.join()
            print("[chaos] load and faults done; waiting for recovery", flush=True)
            violations, figures = recovered_check(
                run, planned, chaos_receiver.receiver, down_receiver=down.receiver
            )
            figures["seed"] = seed
            figures["size"] = args.size
            if violations:
                logs_keep(ctx.tmp)
    finally:
        pg.destroy()
        redis.destroy()
    return result_write(figures, violations)


if __name__ == "__main__":
    sys.exit(main())
