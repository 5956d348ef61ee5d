"""A deploy target's circuit breaker and its limit of jobs in flight (docs/subsystems/executors.md,
"A target's breaker"): what stands between a job and its next trigger attempt.

- ``target_gate``: in the transaction that would open a job's next attempt, whether it may
  go now, or must wait (until when, and why). A target's row is locked meanwhile, so that
  two workers never both take the last slot or both become the probe;
- ``attempt_counted``: in the transaction that closes an attempt, its outcome counted: a
  failure (unreachable, timed out, 5xx) adds to the failures in a row and may open the
  breaker or open it again; an answer (a 2xx, a refusal: the target is up) clears them, and
  the probe's closes a half-open breaker;
- ``breaker_set``: an operator opens or closes a breaker.

Every change of a breaker is an operator action (``set_deploy_target_breaker``), the
system's or the operator's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from core.actors import Actor
from trail.models import OperatorAction
from trail.services import operator_action_record

from ..executors import TriggerResult
from ..models import (
    BreakerState,
    DeployTarget,
    Job,
    JobStatus,
    TriggerAttempt,
    TriggerPhase,
)

logger = logging.getLogger(__name__)

Outcome = TriggerAttempt.Outcome


class BreakerCause:
    FAILURES = "failures"
    COOLDOWN = "cooldown"
    PROBE_SUCCEEDED = "probe_succeeded"
    PROBE_FAILED = "probe_failed"
    PROBE_LOST = "probe_lost"
    OPERATOR = "operator"


# The words a waiting job's detail starts with (its client reads them: they never change).
BREAKER_OPEN = "breaker_open"
TARGET_BUSY = "target_busy"


@dataclass(frozen=True)
class Gate:
    """``wait_until`` is ``None`` when the attempt may go now; else the job waits until
    then, queued, with ``detail``."""

    wait_until: datetime | None = None
    detail: str = ""


GO = Gate()


def _cooldown() -> timedelta:
    return timedelta(seconds=settings.DEPLOY_TARGET_BREAKER_COOLDOWN_SECONDS)


def _probe_lost_after() -> timedelta:
    """A half-open breaker whose probe shows nothing for this long takes another probe:
    its job was lost, or failed for reasons of its own."""
    return _cooldown() + timedelta(seconds=settings.DEPLOY_RUNNING_LEASE_SECONDS)


def _target_write(target: DeployTarget, *fields: str) -> None:
    """Writes the breaker's ``fields`` of a locked target (its settings are the operators',
    ``targets.deploy_target_save``)."""
    DeployTarget.objects.filter(pk=target.pk).update(
        **{name: getattr(target, name) for name in fields}
    )


def _breaker_move(
    *,
    target: DeployTarget,
    state: str,
    cause: str,
    at: datetime,
    actor: Actor | None = None,
    probe: Job | None = None,
    reason: str = "",
) -> None:
    """Moves a locked target's breaker to ``state``, recorded as an operator action."""
    previous = target.breaker_state
    target.breaker_state = state
    target.breaker_changed_at = at
    target.breaker_probe = probe
    if state == BreakerState.CLOSED:
        target.breaker_failures = 0
    _target_write(
        target,
        "breaker_state",
        "breaker_changed_at",
        "breaker_probe",
        "breaker_failures",
    )
    operator_action_record(
        action=OperatorAction.Action.SET_DEPLOY_TARGET_BREAKER,
        actor=actor or Actor.system(),
        reason=reason,
        details={
            "target": target.name,
            "target_id": target.pk,
            "previous": previous,
            "state": state,
            "cause": cause,
            "failures": target.breaker_failures,
            "probe_job": probe.public_id if probe is not None else "",
        },
    )
    logger.warning(
        "deploy_target.breaker",
        extra={
            "target": target.name,
            "previous": previous,
            "state": state,
            "cause": cause,
            "failures": target.breaker_failures,
        },
    )


def _in_flight(target: DeployTarget, *, up_to: int) -> int:
    """The target's jobs in flight (an attempt made, not finished), counted up to ``up_to``
    (the partial index ``deployments_job_flight_idx``)."""
    return (
        Job.objects.filter(
            target=target,
            status__in=[JobStatus.QUEUED, JobStatus.RUNNING],
            trigger_attempt_count__gt=0,
        )
        .values("pk")[:up_to]
        .count()
    )


def _waiting_before(target: DeployTarget, job: Job, *, up_to: int) -> int:
    """The target's jobs older than ``job`` that wait for their first attempt, which take a
    freed slot first; counted up to ``up_to`` (``deployments_job_turn_idx``)."""
    return (
        Job.objects.filter(
            target=target,
            status=JobStatus.QUEUED,
            trigger_attempt_count=0,
            trigger_phase=TriggerPhase.RETRY_WAIT,
            pk__lt=job.pk,
        )
        .values("pk")[:up_to]
        .count()
    )


def target_gate(*, job: Job, now: datetime) -> Gate:
    """Whether the locked job's next attempt may go now (docs/subsystems/executors.md, "A
    target's breaker"). Locks the job's target until the caller's transaction ends."""
    if job.target_id is None:
        return GO
    state, limit = (
        DeployTarget.objects.filter(pk=job.target_id)
        .values_list("breaker_state", "max_in_flight")
        .get()
    )
    if state == BreakerState.CLOSED and not (limit and job.trigger_attempt_count == 0):
        # Nothing to decide, nothing to lock: a breaker that opens meanwhile holds the
        # job's next attempt, not this one (it was closed when the attempt was due).
        return GO
    target = DeployTarget.objects.select_for_update().get(pk=job.target_id)
    waiting = (
        f"{BREAKER_OPEN}: the deploy target failed {target.breaker_failures} "
        "attempts in a row; the trigger waits until it answers again"
    )
    if target.breaker_state == BreakerState.OPEN:
        due = (target.breaker_changed_at or now) + _cooldown()
        if now < due:
            return Gate(wait_until=due, detail=waiting)
        # The cool-down is over: this job's attempt is the probe.
        _breaker_move(
            target=target,
            state=BreakerState.HALF_OPEN,
            cause=BreakerCause.COOLDOWN,
            at=now,
            probe=job,
        )
        return GO
    if target.breaker_state == BreakerState.HALF_OPEN:
        if target.breaker_probe_id == job.pk:
            return GO
        changed = target.breaker_changed_at or now
        if target.breaker_probe_id is None or changed + _probe_lost_after() <= now:
            _breaker_move(
                target=target,
                state=BreakerState.HALF_OPEN,
                cause=BreakerCause.PROBE_LOST,
                at=now,
                probe=job,
            )
            return GO
        wait = timedelta(seconds=settings.DEPLOY_TARGET_WAIT_SECONDS)
        return Gate(wait_until=now + wait, detail=waiting)
    limit = target.max_in_flight
    if limit and job.trigger_attempt_count == 0:
        # A job already in flight (a retry) holds its slot; a new one takes a free one,
        # after the jobs that waited longer.
        taken = _in_flight(target, up_to=limit)
        if taken < limit:
            taken += _waiting_before(target, job, up_to=limit - taken)
        if taken >= limit:
            wait = timedelta(seconds=settings.DEPLOY_TARGET_WAIT_SECONDS)
            return Gate(
                wait_until=now + wait,
                detail=f"{TARGET_BUSY}: the deploy target has {limit} jobs in flight, "
                "its limit; the trigger waits for its turn",
            )
    return GO


def _failed(result: TriggerResult) -> bool:
    """An attempt that says the target is failing: nothing answered (refused, unreachable,
    timed out, dropped), or a 5xx. A 4xx, a 429 and a 2xx are answers."""
    if result.outcome not in (Outcome.TRANSIENT, Outcome.AMBIGUOUS):
        return False
    return result.status_code is None or result.status_code >= 500


def attempt_counted(*, job: Job, result: TriggerResult, at: datetime) -> None:
    """Counts a closed attempt of the locked job against its target's breaker."""
    if job.target_id is None:
        return
    failed = _failed(result)
    if not failed:
        state, failures, probe_id = (
            DeployTarget.objects.filter(pk=job.target_id)
            .values_list("breaker_state", "breaker_failures", "breaker_probe_id")
            .get()
        )
        if not failures and not (
            state == BreakerState.HALF_OPEN and probe_id == job.pk
        ):
            return  # an answer with nothing to clear: no lock, no write
    target = DeployTarget.objects.select_for_update().get(pk=job.target_id)
    probe = target.breaker_probe_id == job.pk
    if not failed:
        if target.breaker_failures:
            target.breaker_failures = 0
            _target_write(target, "breaker_failures")
        if target.breaker_state == BreakerState.HALF_OPEN and probe:
            _breaker_move(
                target=target,
                state=BreakerState.CLOSED,
                cause=BreakerCause.PROBE_SUCCEEDED,
                at=at,
            )
        return
    window = timedelta(seconds=settings.DEPLOY_TARGET_BREAKER_WINDOW_SECONDS)
    fresh = target.breaker_failed_at is None or target.breaker_failed_at + window < at
    target.breaker_failures = 1 if fresh else target.breaker_failures + 1
    target.breaker_failed_at = at
    _target_write(target, "breaker_failures", "breaker_failed_at")
    threshold = settings.DEPLOY_TARGET_BREAKER_FAILURES
    if target.breaker_state == BreakerState.HALF_OPEN and probe:
        _breaker_move(
            target=target,
            state=BreakerState.OPEN,
            cause=BreakerCause.PROBE_FAILED,
            at=at,
        )
    elif (
        target.breaker_state == BreakerState.CLOSED
        and threshold > 0
        and target.breaker_failures >= threshold
    ):
        _breaker_move(
            target=target, state=BreakerState.OPEN, cause=BreakerCause.FAILURES, at=at
        )


def breaker_set(*, target: DeployTarget, state: str, actor: Actor, reason: str) -> bool:
    """An operator opens (``open``) or closes (``closed``) a target's breaker; recorded.
    ``False`` when it already was so."""
    if state not in (BreakerState.OPEN, BreakerState.CLOSED):
        raise ValueError(f"an operator opens or closes a breaker, not {state!r}")
    locked = DeployTarget.objects.select_for_update().get(pk=target.pk)
    if locked.breaker_state == state:
        return False
    _breaker_move(
        target=locked,
        state=state,
        cause=BreakerCause.OPERATOR,
        at=timezone.now(),
        actor=actor,
        reason=reason,
    )
    return True
