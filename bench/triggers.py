"""Deployment triggers: how fast the workers trigger jobs, next to the job floor of the same
run, and what a retry that waits costs.

- Floor: BENCH_TRIGGER_JOBS (1,000) deployments committed with no message (as the API commits them),
  run by two worker processes (each a Celery worker with its relay) with the ``simulated``
  executor taking no time: jobs/s from the first job done to the last (the database's own
  timestamps, so worker start-up does not count).
- Triggers: the same with the ``http`` executor against a receiver in this process that
  verifies each request (``standardwebhooks``) and answers 202 at once: jobs/s from the first
  job moved to ``running`` to the last. Floor and triggers alternate for BENCH_TRIGGER_ROUNDS
  (3) rounds; their medians are compared.
- Through a deploy target: the same triggers routed by a target (its breaker read on each
  attempt), and by a target with a limit of jobs in flight it never reaches (each first
  attempt takes the target's row lock and counts its jobs in flight;
  docs/subsystems/executors.md, "A target's breaker"), in the same alternating rounds:
  jobs/s next to the triggers of the default route.
- A retry that waits holds no worker: 100 jobs whose first attempt is answered 503 with
  ``Retry-After: 300`` wait for their retry in the database; the CPU time of every process of
  both workers (main process with its relay, pool processes) over BENCH_TRIGGER_WAIT_SECONDS
  of that wait, next to the same workers' CPU time over as long with nothing at all to do.

    python -m bench.triggers        # JSON in var/bench/triggers.json
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from bench.harness import (
    BIN,
    BenchContext,
    Figure,
    Process,
    broker_purge,
    database_reset,
    django_setup,
    median,
    report,
    stack_env,
    wait_for,
    workers_ready,
)

JOBS = int(os.environ.get("BENCH_TRIGGER_JOBS", "1000"))
# The machine's load drifts: floor and triggers are measured in alternating rounds and
# compared by their medians.
ROUNDS = int(os.environ.get("BENCH_TRIGGER_ROUNDS", "3"))
WAITING = 100
WAIT_SECONDS = float(os.environ.get("BENCH_TRIGGER_WAIT_SECONDS", "20"))
TIMEOUT = float(os.environ.get("BENCH_TRIGGER_TIMEOUT", "600"))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _workers(ctx: BenchContext, tag: str, **env: str) -> list[Process]:
    """Two worker processes, as production scales them: a Celery worker each, a pool of
    one, each with its relay."""
    started = []
    for i in range(2):
        args = [
            str(BIN / "celery"),
            "-A",
            "config",
            "worker",
            "--loglevel",
            "WARNING",
            "--concurrency",
            "1",
            "--hostname",
            f"bench-{tag}{i}-{time.monotonic_ns()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        process = Process(
            args,
            stack_env(CELERY_METRICS_PORT="0", **env),
            ctx.tmp / f"worker-{tag}-{i}.log",
        ).start()
        ctx.processes.append(process)
        started.append(process)
    return started


def _jobs_create(n: int, *, tag: str) -> list[str]:
    """``n`` queued deployments with no message yet, as the API leaves them."""
    from core.actors import Actor
    from deployments.models import Deployment
    from deployments.services.jobs import job_new
    from trail.api_clients import api_client_create

    client, _ = api_client_create(actor=Actor.system(), name=f"bench-triggers-{tag}")
    jobs = [
        job_new(
            kind="deployment",
            client=client,
            idempotency_key=f"{tag}-{i}",
            data={
                "repository": "acme/payment-service",
                "commit_sha": "abc123def456",
                "environment": "staging",
            },
        )
        for i in range(n)
    ]
    Deployment.objects.bulk_create(jobs, batch_size=1000)
    return [job.public_id for job in jobs]


def _rate(moments: list, n: int) -> float:
    if len(moments) < 2:
        return float("nan")
    seconds = (max(moments) - min(moments)).total_seconds()
    return (n - 1) / seconds if seconds > 0 else float("nan")


def _done_at(public_ids: list[str], to_status: str) -> list:
    from deployments.models import JobTransition

    return list(
        JobTransition.objects.filter(
            job__public_id__in=public_ids, to_status=to_status
        ).values_list("at", flat=True)
    )


def _group_cpu_seconds(processes: list[Process]) -> float:
    """CPU time (user + system) of every process in the workers' process groups."""
    groups = {process.pid for process in processes}
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        # After the command: state, ppid, pgrp, ... utime (14th field), stime (15th).
        if int(fields[2]) in groups:
            total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def _stop(ctx: BenchContext, workers: list[Process]) -> None:
    for worker in workers:
        ctx.stop(worker)


def _floor(ctx: BenchContext, round_: int) -> float:
    ids = _jobs_create(JOBS, tag=f"floor{round_}")
    broker_purge()
    workers = _workers(
        ctx, f"floor{round_}", DEPLOY_EXECUTOR="simulated", DEPLOY_SIMULATED_SECONDS="0"
    )
    wait_for(
        lambda: len(_done_at(ids, "succeeded")) == JOBS,
        timeout=TIMEOUT,
        what=f"{JOBS} simulated jobs",
    )
    _stop(ctx, workers)
    return _rate(_done_at(ids, "succeeded"), JOBS)


def _triggers(ctx: BenchContext, receiver, round_: int) -> float:
    ids = _jobs_create(JOBS, tag=f"http{round_}")
    broker_purge()
    workers = _workers(
        ctx,
        f"http{round_}",
        DEPLOY_EXECUTOR="http",
        DEPLOY_HTTP_URL=receiver.url,
        DEPLOY_HTTP_SECRET=receiver.secret,
    )
    wait_for(
        lambda: len(_done_at(ids, "running")) == JOBS,
        timeout=TIMEOUT,
        what=f"{JOBS} jobs triggered",
    )
    _stop(ctx, workers)
    return _rate(_done_at(ids, "running"), JOBS)


def _targeted(
    ctx: BenchContext, receiver, round_: int, *, limit: int | None = None
) -> float:
    """``_triggers`` through a deploy target (with ``limit`` jobs in flight at most),
    disabled again afterwards."""
    from core.actors import Actor
    from deployments.models import DeployTarget
    from deployments.targets import deploy_target_save

    target = DeployTarget(
        name=f"bench-target-{round_}-{limit or 0}",
        executor="http",
        url=receiver.url,
        repository_pattern="acme/*",
        max_in_flight=limit,
    )
    deploy_target_save(target=target, secret=receiver.secret, actor=Actor.system())
    tag = f"target{round_}-{limit or 0}"
    ids = _jobs_create(JOBS, tag=tag)
    broker_purge()
    workers = _workers(ctx, tag, DEPLOY_EXECUTOR="simulated")
    wait_for(
        lambda: len(_done_at(ids, "running")) == JOBS,
        timeout=TIMEOUT,
        what=f"{JOBS} jobs triggered through a target",
    )
    _stop(ctx, workers)
    target.is_enabled = False
    deploy_target_save(target=target, secret=None, actor=Actor.system())
    return _rate(_done_at(ids, "running"), JOBS)


def _waiting_cost(ctx: BenchContext, receiver) -> dict:
    from deployments.models import Deployment
    from tests.deployments.receiver import Fault

    broker_purge()
    workers = _workers(
        ctx,
        "wait",
        DEPLOY_EXECUTOR="http",
        DEPLOY_HTTP_URL=receiver.url,
        DEPLOY_HTTP_SECRET=receiver.secret,
    )
    workers_ready(workers)
    time.sleep(2)  # their first rounds over: idle
    before = _group_cpu_seconds(workers)
    time.sleep(WAIT_SECONDS)
    idle = _group_cpu_seconds(workers) - before

    # Every first attempt of these jobs is told to come back in five minutes.
    receiver.fault_for = lambda webhook_id: Fault.status(503, retry_after=300)
    ids = _jobs_create(WAITING, tag="wait")
    waiting = Deployment.objects.filter(public_id__in=ids, trigger_phase="retry_wait")
    wait_for(
        lambda: waiting.count() == WAITING,
        timeout=120,
        what=f"{WAITING} jobs waiting for their retry",
    )
    requests_before = len(receiver.received)
    before = _group_cpu_seconds(workers)
    time.sleep(WAIT_SECONDS)
    during = _group_cpu_seconds(workers) - before
    still_waiting = waiting.count()
    requests_during = len(receiver.received) - requests_before
    _stop(ctx, workers)
    return {
        "idle_cpu_seconds": idle,
        "waiting_cpu_seconds": during,
        "still_waiting": still_waiting,
        "requests_during_wait": requests_during,
        "window_seconds": WAIT_SECONDS,
    }


def run(ctx: BenchContext) -> list[Figure]:
    django_setup()
    from tests.deployments.receiver import Receiver

    floors, triggers, targeted, limited = [], [], [], []
    with Receiver() as receiver:
        for round_ in range(ROUNDS):
            floors.append(_floor(ctx, round_))
            triggers.append(_triggers(ctx, receiver, round_))
            targeted.append(_targeted(ctx, receiver, round_))
            limited.append(_targeted(ctx, receiver, round_, limit=JOBS * 10))
            print(
                f"[triggers] round {round_}: floor {floors[-1]:,.1f} simulated jobs/s, "
                f"{triggers[-1]:,.1f} jobs triggered/s, {targeted[-1]:,.1f} through a "
                f"target, {limited[-1]:,.1f} through a target with a limit",
                flush=True,
            )
        wait = _waiting_cost(ctx, receiver)
    floor, triggered = median(floors), median(triggers)
    print(f"[triggers] retry wait: {wait}", flush=True)
    return [
        Figure(
            "triggers",
            "floor: simulated jobs/s, 2 worker processes",
            floor,
            "jobs/s",
            extra={"rounds": floors, "jobs": JOBS},
        ),
        Figure(
            "triggers",
            "jobs triggered/s (http, receiver at once), 2 workers",
            triggered,
            "jobs/s",
            floor_name="simulated job floor",
            floor_value=floor,
            target_ratio=0.5,
            extra={"rounds": triggers, "jobs": JOBS},
        ),
        Figure(
            "triggers",
            "jobs triggered/s through a deploy target (its breaker read per attempt)",
            median(targeted),
            "jobs/s",
            floor_name="jobs triggered/s, default route",
            floor_value=triggered,
            extra={"rounds": targeted, "jobs": JOBS},
        ),
        Figure(
            "triggers",
            "jobs triggered/s through a target with a limit (locked and counted)",
            median(limited),
            "jobs/s",
            floor_name="jobs triggered/s, default route",
            floor_value=triggered,
            extra={"rounds": limited, "jobs": JOBS, "max_in_flight": JOBS * 10},
        ),
        Figure(
            "triggers",
            f"worker CPU s over {WAIT_SECONDS:g} s, {WAITING} retries waiting",
            wait["waiting_cpu_seconds"],
            "cpu s",
            floor_name="same workers idle",
            floor_value=wait["idle_cpu_seconds"],
            target_ratio=1.5,
            higher_is_better=False,
            extra=wait,
        ),
        Figure(
            "triggers",
            "jobs still waiting at the end (must be 100)",
            wait["still_waiting"],
            "jobs",
        ),
        Figure(
            "triggers",
            "trigger requests during the wait (must be 0)",
            wait["requests_during_wait"],
            "requests",
        ),
    ]


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="triggers")


if __name__ == "__main__":
    sys.exit(main())
