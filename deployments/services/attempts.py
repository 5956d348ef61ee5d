"""Attempts: a worker's run of one job, however often its message is delivered
(docs/subsystems/executors.md, "A job on a worker").

- ``job_run``: the claim (the executor its deploy target or ``DEPLOY_EXECUTOR`` names), then
  a run executor's one run, or one ``TriggerAttempt`` of a trigger executor, recorded before
  its request leaves and closed with its outcome after;
- the outcome of an attempt moves the job on: running, a retry scheduled through the outbox,
  or failed (docs/subsystems/executors.md, "Outbound calls");
- ``trigger_retry_delay``: the backoff between attempts.

Statuses and transitions are ``jobs``'; this module decides when to set them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.backoff import full_jitter_delay
from core.secrets import secrets_scrubbed, settings_secrets
from core.tracing import links_add, span, tracing_enabled

from .. import metrics
from ..executors import (
    ExecutionResult,
    Executor,
    RunExecutor,
    TriggerCall,
    TriggerExecutor,
    TriggerResult,
    UnknownExecutor,
    executor_get,
)
from ..models import (
    Deployment,
    DeployTarget,
    Job,
    JobStatus,
    TriggerAttempt,
    TriggerPhase,
)
from ..outbound import outcome_classify, traceback_kept
from ..selectors import deploy_target_for, deploy_target_serves
from ..trigger_urls import url_shown
from .breakers import BREAKER_OPEN, TARGET_BUSY, attempt_counted, target_gate
from .jobs import (
    Reason,
    job_locked,
    job_save,
    job_status_set,
    job_worker_lost_fail,
    report_applies,
)

logger = logging.getLogger(__name__)


class RunOutcome(StrEnum):
    """What one delivery of a job's message came to: ``job_run``'s answer, and its task's
    result (docs/subsystems/executors.md, "A deployment or build job")."""

    # The job moved on.
    SUCCEEDED = "succeeded"  # a run executor's result
    FAILED = "failed"  # its executor's result, or the trigger refused or unreachable
    TRIGGERED = "triggered"  # a 2xx: the downstream has it
    RETRY_SCHEDULED = "retry_scheduled"  # the relay publishes it again when due
    EXTERNAL = "external"  # claimed; it waits for a report
    WORKER_LOST = "worker_lost"  # its run's lease ran out with no result: failed
    # Nothing done.
    MISSING = "missing"  # no such job (any more)
    NOT_QUEUED = "not_queued"  # a report moved it on before this delivery
    ALREADY_STARTED = "already_started"  # another delivery holds it within its lease
    ALREADY_TRIGGERED = "already_triggered"  # delivered or given up before
    NOT_DUE = "not_due"  # an early copy of a message for a retry not due yet
    SUPERSEDED = "superseded"  # a takeover or a report decided before this outcome
    # Its deploy target's breaker is open, or its limit of jobs in flight reached: the job
    # waits, queued; the relay publishes it again when due.
    WAITING = "waiting"


@dataclass(frozen=True)
class Route:
    """Which executor carries a job out, and the deploy target that says so (``None``: no
    target matched, ``DEPLOY_EXECUTOR``)."""

    executor: str
    target: DeployTarget | None


def job_route(*, job: Job) -> Route:
    """The executor of a job about to be claimed: its deploy target's (one that serves the
    job's client), else ``DEPLOY_EXECUTOR`` (``selectors.deploy_target_for``)."""
    target = deploy_target_for(
        kind=job.kind,
        client_id=job.client_id,
        repository=job.repository,
        environment=job.environment,
    )
    executor = target.executor if target is not None else settings.DEPLOY_EXECUTOR
    return Route(executor=executor, target=target)


@dataclass(frozen=True)
class _OpenAttempt:
    """An attempt committed before its request leaves, and what it is to send."""

    attempt: TriggerAttempt
    call: TriggerCall


def job_run(*, kind: str, public_id: str, worker: str) -> RunOutcome:
    """Carries out one job, however often its message is delivered, and says what this
    delivery came to (docs/subsystems/executors.md, "A deployment or build job").

    The first delivery claims the job in a committed transaction, with the executor its
    deploy target or ``DEPLOY_EXECUTOR`` names: a run executor then runs once, ``external``
    calls nothing, a trigger executor makes one attempt, committed open before its request
    leaves and closed with its outcome after. A later delivery never runs a job twice: it
    fails a run whose lease ran out (``worker_lost``) and takes over an attempt whose lease
    ran out (closed ``lost``, sent again under the same id)."""
    now = timezone.now()
    with transaction.atomic():
        job = job_locked(kind=kind, public_id=public_id)
        if job is None:
            return RunOutcome.MISSING
        if tracing_enabled():
            # The message's process span links to the request that made the job.
            links_add([job.traceparent])
        if job.executor_started_at is None:
            if job.status != JobStatus.QUEUED:
                # An external report moved it on before any worker.
                return RunOutcome.NOT_QUEUED
            route = job_route(job=job)
            _job_claim(job=job, route=route, worker=worker, now=now)
            try:
                executor = executor_get(route.executor)
            except UnknownExecutor as exc:
                job_status_set(
                    job=job,
                    status=JobStatus.FAILED,
                    at=now,
                    actor=worker,
                    detail=f"{Reason.EXECUTOR_UNKNOWN}: {exc}",
                )
                return RunOutcome.FAILED
            if isinstance(executor, TriggerExecutor):
                gate = target_gate(job=job, now=now)
                if gate.wait_until is not None:
                    _trigger_wait(job=job, until=gate.wait_until, detail=gate.detail)
                    return RunOutcome.WAITING
                opened = _trigger_attempt_open(
                    job=job, executor=executor, now=now, worker=worker
                )
            elif isinstance(executor, RunExecutor):
                # Running: the job's lease starts, and its key's deadline moves to it.
                job_status_set(job=job, status=JobStatus.RUNNING, at=now, actor=worker)
            else:
                _external_wait(job=job)
                return RunOutcome.EXTERNAL
        else:
            claimed = _claimed_executor(job)
            if claimed is None or isinstance(claimed, RunExecutor):
                return _run_redelivered(job=job, now=now, worker=worker)
            if not isinstance(claimed, TriggerExecutor):
                return RunOutcome.EXTERNAL
            executor = claimed
            step = _trigger_resume(
                job=job, kind=kind, executor=executor, now=now, worker=worker
            )
            if isinstance(step, RunOutcome):
                return step
            opened = step
    if isinstance(executor, RunExecutor):
        return _job_execute(
            kind=kind, public_id=public_id, job=job, executor=executor, worker=worker
        )
    assert isinstance(executor, TriggerExecutor)  # external ones returned above
    return _trigger_attempt_make(
        kind=kind, public_id=public_id, opened=opened, executor=executor, worker=worker
    )


def _job_claim(*, job: Job, route: Route, worker: str, now: datetime) -> None:
    job.executor_started_at = now
    job.claimed_by = worker[:255]
    job.executor = route.executor[:32]
    job.target = route.target
    job_save(
        job=job, fields=["executor_started_at", "claimed_by", "executor", "target"]
    )


def _claimed_executor(job: Job) -> Executor | None:
    """The executor the job was claimed with; ``None`` for a job claimed before executors
    were recorded (a run executor's rules apply) or by one no longer installed."""
    if not job.executor:
        return None
    try:
        return executor_get(job.executor)
    except UnknownExecutor:
        return None


def _run_redelivered(*, job: Job, now: datetime, worker: str) -> RunOutcome:
    if (
        job.status == JobStatus.RUNNING
        and job.lease_expires_at is not None
        and job.lease_expires_at <= now
        and job.executor_finished_at is None
    ):
        job_worker_lost_fail(job=job, actor=worker, now=now)
        return RunOutcome.WORKER_LOST
    return RunOutcome.ALREADY_STARTED


def _external_wait(*, job: Job) -> None:
    """An ``external`` job waits for its first report: its key counts as stuck if none
    came within ``DEPLOY_RUNNING_LEASE_SECONDS`` of the claim (``jobs._key_deadline``)."""
    logger.info("job.external", extra={"job_id": job.public_id})


def _job_execute(
    *, kind: str, public_id: str, job: Job, executor: RunExecutor, worker: str
) -> RunOutcome:
    try:
        result = executor.run(job)
    except Exception as exc:  # the executor's failure is the job's failure
        # Its text may hold anything (an address, a secret): the job's client reads its
        # class; operators read the traceback, scrubbed (docs/security.md, "Error text").
        logger.error(
            "job.executor_error",
            extra={
                "job_id": public_id,
                "error_class": type(exc).__name__,
                "traceback": traceback_kept(exc),
            },
        )
        result = ExecutionResult(
            succeeded=False, detail=f"executor error: {type(exc).__name__}"
        )
    else:
        result = replace(
            result, detail=secrets_scrubbed(result.detail, settings_secrets())
        )

    finished = timezone.now()
    status = JobStatus.SUCCEEDED if result.succeeded else JobStatus.FAILED
    with transaction.atomic():
        locked = job_locked(kind=kind, public_id=public_id)
        if locked is None:  # gone while the executor ran
            return RunOutcome.MISSING
        locked.executor_finished_at = finished
        job_save(job=locked, fields=["executor_finished_at"])
        if not report_applies(job=locked, status=status, at=finished):
            return RunOutcome.SUPERSEDED
        job_status_set(
            job=locked, status=status, at=finished, actor=worker, detail=result.detail
        )
    return RunOutcome(status)


# --- trigger executors -------------------------------------------------------------------

Outcome = TriggerAttempt.Outcome
WAIT_REASONS = (f"{BREAKER_OPEN}:", f"{TARGET_BUSY}:")
# What a retry may fix; after an ambiguous or lost attempt the downstream may hold the job.
RETRYABLE_OUTCOMES = frozenset({Outcome.TRANSIENT, Outcome.AMBIGUOUS, Outcome.LOST})
LOOK_UP_AFTER = frozenset({Outcome.AMBIGUOUS, Outcome.LOST})
_TRIGGER_FIELDS = [
    "trigger_phase",
    "trigger_attempt_count",
    "next_attempt_at",
    "lease_expires_at",
    "last_dispatched_at",
    "executor_finished_at",
]


def trigger_retry_delay(*, attempt: int, retry_after: float | None = None) -> float:
    """Seconds before the attempt after ``attempt``: the receiver's ``Retry-After`` when it
    gave one, else exponential backoff with full jitter from
    ``DEPLOY_TRIGGER_RETRY_BASE_SECONDS``; at most ``DEPLOY_TRIGGER_RETRY_MAX_SECONDS``."""
    ceiling = float(settings.DEPLOY_TRIGGER_RETRY_MAX_SECONDS)
    if retry_after is not None:
        return min(max(float(retry_after), 0.0), ceiling)
    return full_jitter_delay(
        attempt=attempt,
        base=settings.DEPLOY_TRIGGER_RETRY_BASE_SECONDS,
        ceiling=ceiling,
    )


def _attempts_of(job: Job) -> QuerySet[TriggerAttempt]:
    return TriggerAttempt.objects.filter(job=job)


def _trigger_attempt_open(
    *, job: Job, executor: TriggerExecutor, now: datetime, worker: str
) -> _OpenAttempt:
    """The next attempt, recorded before its request leaves (the caller commits it): the
    job is ``trigger_sent`` with a lease of ``DEPLOY_RUNNING_LEASE_SECONDS``."""
    number = job.trigger_attempt_count + 1
    target = job.target
    url = (target.url if target is not None else "") or executor.default_url()
    secret = (target.secret if target is not None else "") or executor.default_secret()
    look_up_first = (
        number > 1 and _attempts_of(job).filter(outcome__in=LOOK_UP_AFTER).exists()
    )
    attempt = TriggerAttempt.objects.create(
        number=number,
        executor=executor.name,
        target_name=target.name if target is not None else "",
        url=url_shown(url),
        started_at=now,
        worker=worker[:255],
        job=job,
    )
    lease = now + timedelta(seconds=settings.DEPLOY_RUNNING_LEASE_SECONDS)
    job.trigger_attempt_count = number
    job.trigger_phase = TriggerPhase.SENT
    job.next_attempt_at = None
    job.lease_expires_at = lease
    fields = list(_TRIGGER_FIELDS)
    if job.detail.startswith(WAIT_REASONS):
        # It waited for its target: that is over.
        job.detail = ""
        fields += ["detail", "updated_at"]
    job_save(job=job, fields=fields)
    call = TriggerCall(
        job=job,
        attempt=number,
        url=url,
        secret=secret,
        look_up_first=look_up_first,
    )
    return _OpenAttempt(attempt=attempt, call=call)


def _trigger_resume(
    *, job: Job, kind: str, executor: TriggerExecutor, now: datetime, worker: str
) -> _OpenAttempt | RunOutcome:
    """A later delivery of a claimed trigger job: the next attempt, or why there is none."""
    if job.status != JobStatus.QUEUED:
        return RunOutcome.NOT_QUEUED
    if job.trigger_phase not in (TriggerPhase.SENT, TriggerPhase.RETRY_WAIT):
        return RunOutcome.ALREADY_TRIGGERED
    open_attempt = _attempts_of(job).filter(finished_at__isnull=True).first()
    if open_attempt is not None:
        if job.lease_expires_at is not None and job.lease_expires_at > now:
            return RunOutcome.ALREADY_STARTED  # its worker is at it
        TriggerAttempt.objects.filter(pk=open_attempt.pk).close(
            finished_at=now,
            outcome=Outcome.LOST,
            error="no outcome within the lease: the worker was lost mid-attempt",
            duration_seconds=(now - open_attempt.started_at).total_seconds(),
        )
        transaction.on_commit(
            lambda: metrics.TRIGGER_ATTEMPTS.labels(executor.name, Outcome.LOST).inc()
        )
        logger.warning(
            "job.trigger_lost",
            extra={"job_id": job.public_id, "attempt": open_attempt.number},
        )
        if open_attempt.number >= settings.DEPLOY_TRIGGER_MAX_ATTEMPTS:
            _trigger_give_up(
                job=job,
                at=now,
                actor=worker,
                detail=f"{Reason.TRIGGER_UNREACHABLE}: {open_attempt.number} attempts, "
                "the last lost with its worker",
            )
            return RunOutcome.FAILED
    elif job.next_attempt_at is not None and job.next_attempt_at > now:
        # An early copy of a message; the relay publishes it when due.
        return RunOutcome.NOT_DUE
    if job.target_id is not None and not deploy_target_serves(
        target_id=job.target_id, client_id=job.client_id
    ):
        # Named for other clients since the claim: never sent there again.
        _trigger_give_up(
            job=job,
            at=now,
            actor=worker,
            detail=f"{Reason.TRIGGER_REJECTED}: its deploy target no longer serves this "
            "API client",
        )
        return RunOutcome.FAILED
    gate = target_gate(job=job, now=now)
    if gate.wait_until is not None:
        _trigger_wait(job=job, until=gate.wait_until, detail=gate.detail)
        return RunOutcome.WAITING
    return _trigger_attempt_open(job=job, executor=executor, now=now, worker=worker)


def _trigger_wait(*, job: Job, until: datetime, detail: str | None = None) -> None:
    """The job waits in the database until ``until``, queued: out of the message's way,
    into the partial retry index; the relay publishes it when due. For its retry, or for
    its target (``breakers.target_gate``: ``detail`` then says why; no attempt is made or
    counted)."""
    job.trigger_phase = TriggerPhase.RETRY_WAIT
    job.next_attempt_at = until
    job.last_dispatched_at = None
    job.lease_expires_at = None
    fields = list(_TRIGGER_FIELDS)
    if detail is not None:
        job.detail = detail
        fields += ["detail", "updated_at"]
    job_save(job=job, fields=fields)


def _trigger_attempt_make(
    *,
    kind: str,
    public_id: str,
    opened: _OpenAttempt,
    executor: TriggerExecutor,
    worker: str,
) -> RunOutcome:
    """The call, outside any transaction, then its outcome recorded."""
    # Whatever an executor reports, or raises, is kept without the call's secret (nor
    # any other it may quote): scrubbed here, for every executor (docs/security.md,
    # "Secrets").
    secrets = [opened.call.secret]
    started = time.monotonic()
    traced = (
        _trigger_span(kind=kind, public_id=public_id, opened=opened, executor=executor)
        if tracing_enabled()
        else contextlib.nullcontext()
    )
    try:
        with traced as trigger_span:
            result = executor.trigger(opened.call)
            if trigger_span is not None:
                trigger_span.set_attribute("deployments.outcome", result.outcome)
    except Exception as exc:  # a failure of the executor itself is classified too
        classified = outcome_classify(error=exc, secrets=secrets)
        logger.error(
            "job.trigger_error",
            extra={
                "job_id": public_id,
                "error_class": classified.error_class,
                "traceback": traceback_kept(exc, secrets=secrets),
            },
        )
        result = TriggerResult(
            outcome=classified.outcome,
            error_class=classified.error_class,
            error=classified.error,
        )
    result = result.scrubbed(secrets)
    duration = time.monotonic() - started
    metrics.TRIGGER_ATTEMPTS.labels(executor.name, result.outcome).inc()
    metrics.TRIGGER_DURATION.labels(executor.name).observe(duration)
    logger.info(
        "job.trigger_attempt",
        extra={
            "job_id": public_id,
            "attempt": opened.attempt.number,
            "executor": executor.name,
            "outcome": result.outcome,
            "status_code": result.status_code,
            "error_class": result.error_class,
            "duration_seconds": round(duration, 4),
        },
    )
    return _trigger_outcome_record(
        kind=kind,
        public_id=public_id,
        attempt=opened.attempt,
        result=result,
        duration=duration,
        actor=worker,
    )


def _trigger_span(
    *, kind: str, public_id: str, opened: _OpenAttempt, executor: TriggerExecutor
):
    """Tracing: the span of one trigger attempt, whose requests (httpx's spans) carry its
    ``traceparent`` downstream. The job's and attempt's names, never the call's secret."""
    return span(
        f"trigger {executor.name}",
        kind="internal",
        attributes={
            "deployments.job_id": public_id,
            "deployments.kind": kind,
            "deployments.executor": executor.name,
            "deployments.attempt": opened.attempt.number,
        },
    )


def _trigger_outcome_record(
    *,
    kind: str,
    public_id: str,
    attempt: TriggerAttempt,
    result: TriggerResult,
    duration: float,
    actor: str,
) -> RunOutcome:
    """Closes the attempt with its outcome and moves the job on, under its row lock. An
    attempt already closed (its lease ran out and another delivery took over) records
    nothing: that delivery's attempt decides."""
    finished = timezone.now()
    retry_at = None
    if (
        result.outcome in RETRYABLE_OUTCOMES
        and attempt.number < settings.DEPLOY_TRIGGER_MAX_ATTEMPTS
    ):
        delay = trigger_retry_delay(
            attempt=attempt.number, retry_after=result.retry_after
        )
        retry_at = finished + timedelta(seconds=delay)
    with transaction.atomic():
        job = job_locked(kind=kind, public_id=public_id)
        assert job is not None
        closed = TriggerAttempt.objects.filter(pk=attempt.pk).close(
            finished_at=finished,
            outcome=result.outcome,
            status_code=result.status_code,
            error_class=result.error_class[:100],
            error=result.error[:500],
            duration_seconds=duration,
            retry_at=retry_at,
            url=url_shown(result.url) if result.url else attempt.url,
            downstream=(
                result.downstream if result.outcome == Outcome.DELIVERED else None
            ),
        )
        if not closed:
            return RunOutcome.SUPERSEDED
        attempt_counted(job=job, result=result, at=finished)
        if result.outcome == Outcome.DELIVERED:
            return _trigger_delivered(job=job, result=result, at=finished, actor=actor)
        if job.status != JobStatus.QUEUED:
            # A report moved the job on meanwhile: whoever carries it out has it.
            job.trigger_phase = TriggerPhase.TRIGGERED
            job.next_attempt_at = None
            job_save(job=job, fields=_TRIGGER_FIELDS)
            return RunOutcome.SUPERSEDED
        if result.outcome == Outcome.REJECTED:
            _trigger_give_up(
                job=job,
                at=finished,
                actor=actor,
                detail=f"{Reason.TRIGGER_REJECTED}: {result.reason()}",
            )
            return RunOutcome.FAILED
        if retry_at is None:
            _trigger_give_up(
                job=job,
                at=finished,
                actor=actor,
                detail=f"{Reason.TRIGGER_UNREACHABLE}: {attempt.number} attempts, "
                f"the last: {result.reason()}",
            )
            return RunOutcome.FAILED
        _trigger_wait(job=job, until=retry_at)
    return RunOutcome.RETRY_SCHEDULED


def _trigger_delivered(
    *, job: Job, result: TriggerResult, at: datetime, actor: str
) -> RunOutcome:
    job.trigger_phase = TriggerPhase.TRIGGERED
    job.next_attempt_at = None
    job.executor_finished_at = at
    fields = list(_TRIGGER_FIELDS)
    if isinstance(job, Deployment) and result.github_deployment_id is not None:
        job.github_deployment_id = result.github_deployment_id
        job.github_commit_sha = result.github_commit_sha or job.github_commit_sha
        fields += ["github_deployment_id", "github_commit_sha"]
    if result.downstream is not None:
        job.downstream = result.downstream
        fields.append("downstream")
    job_save(job=job, fields=fields)
    if job.status == JobStatus.QUEUED and report_applies(
        job=job, status=JobStatus.RUNNING, at=at
    ):
        job_status_set(
            job=job,
            status=JobStatus.RUNNING,
            at=at,
            actor=actor,
            detail=f"{Reason.TRIGGERED}: {result.reason()}",
        )
    return RunOutcome.TRIGGERED


def _trigger_give_up(*, job: Job, at: datetime, actor: str, detail: str) -> None:
    job.trigger_phase = TriggerPhase.GAVE_UP
    job.next_attempt_at = None
    job.lease_expires_at = None
    job.executor_finished_at = at
    job_save(job=job, fields=_TRIGGER_FIELDS)
    job_status_set(job=job, status=JobStatus.FAILED, at=at, actor=actor, detail=detail)
