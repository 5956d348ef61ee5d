"""Jobs: a new deployment or build, its status and its transitions
(docs/subsystems/executors.md, "A deployment or build job").

- ``job_new``: a queued job, not saved yet (the Idempotency-Key path writes it with its key's
  record, docs/subsystems/idempotency.md, "An idempotent API call");
- ``report_applies``: the one ordering rule for reported statuses;
- ``job_status_set``: a locked job moved to a status, with its ``JobTransition`` and its key's
  record kept in step;
- ``jobs_lost_fail``: the sweep's failing of running jobs whose lease ran out.

How a worker carries a job out is ``attempts``; what reports from outside do is ``reports``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.models import ApiClient
from core.tracing import traceparent_current, tracing_enabled
from idempotency.services import (
    idempotency_record_progress_deadline_set,
    idempotency_record_resolve,
)

from ..executors import (
    RunExecutor,
    TriggerExecutor,
    UnknownExecutor,
    executor_get,
)
from ..models import (
    TERMINAL_JOB_STATUSES,
    Build,
    Deployment,
    Job,
    JobKind,
    JobStatus,
    JobTransition,
    TriggerPhase,
    public_id_generate,
)

logger = logging.getLogger(__name__)

# Published by name, so that this module never imports the tasks that run it.
RUN_JOB_TASK = "deployments.run_job"
# A transition's actor names who moved the job: a worker, a status sync's client, a GitHub
# event, or the periodic sweep that fails a job whose worker was lost.
SWEEP_ACTOR = "sweep"


class Reason(StrEnum):
    """The word a job's ``detail`` starts with when the worker or the sweep moved it
    (``<reason>: <what happened>``; docs/subsystems/executors.md, "A deployment or build
    job"). Its client reads it: the values never change."""

    TRIGGERED = "triggered"
    TRIGGER_REJECTED = "trigger_rejected"
    TRIGGER_UNREACHABLE = "trigger_unreachable"
    EXECUTOR_UNKNOWN = "executor_unknown"
    WORKER_LOST = "worker_lost"
    REPORT_LOST = "report_lost"


JOB_MODELS: dict[str, type[Job]] = {
    JobKind.DEPLOYMENT: Deployment,
    JobKind.BUILD: Build,
}
OPERATION_TYPES: dict[str, str] = {
    JobKind.DEPLOYMENT: "deployment.create",
    JobKind.BUILD: "build.create",
}


def job_pickup_deadline(*, job: Job) -> datetime:
    """When a new job's key counts as stuck if no worker has picked the job up: the sweep
    re-dispatches it after ``DEPLOY_REDISPATCH_AFTER_SECONDS`` and runs every
    ``RELAY_SWEEP_INTERVAL_SECONDS``, so by then it has been published twice."""
    return job.created_at + timedelta(
        seconds=settings.DEPLOY_REDISPATCH_AFTER_SECONDS
        + settings.RELAY_SWEEP_INTERVAL_SECONDS
    )


def job_new(*, kind: str, client: ApiClient, idempotency_key: str, data: dict) -> Job:
    """A queued deployment or build, not saved yet: the Idempotency-Key mechanism writes it
    together with the key's record (``OperationResult.resource_row``), and the relay then
    publishes its job (``deployments.outbox``). Nothing here talks to the database or the
    broker. ``data`` is the request's validated body: its kind's own fields
    (``Job.request_fields``) as given, the rest empty when absent."""
    model = JOB_MODELS[kind]
    now = timezone.now()
    job = model(
        public_id=public_id_generate(model.public_id_prefix),
        client=client,
        idempotency_key=idempotency_key,
        repository=data["repository"],
        commit_sha=data["commit_sha"],
        workflow=data.get("workflow") or "",
        triggered_by=data.get("triggered_by") or "",
        **{name: data.get(name) or "" for name in model.request_fields},
        status_changed_at=now,
        created_at=now,
        updated_at=now,
    )
    if tracing_enabled():
        # The request's context, written with the job (left to the column's default when
        # tracing is off).
        job.traceparent = traceparent_current()
    return job


def _transition_record(
    *, job: Job, from_status: str, to_status: str, at: datetime, actor: str, detail: str
) -> JobTransition:
    return JobTransition.objects.create(
        job=job,
        from_status=from_status,
        to_status=to_status,
        at=at,
        actor=actor[:255],
        detail=detail,
    )


def report_applies(
    *, job: Job, status: str, at: datetime, github_status_id: int | None = None
) -> bool:
    """The one ordering rule for reported statuses (status-sync, GitHub's deployment
    statuses, the worker's own results). A non-terminal status never replaces a terminal one.
    Then reports are ordered by their reporter's own sequence where it has one (GitHub's
    ``deployment_status`` ids: only a higher id applies), else by time: a report older than
    the last applied change is not applied. A newer terminal status may replace an older
    terminal one (a failed deploy later reported as succeeded)."""
    if job.status in TERMINAL_JOB_STATUSES and status not in TERMINAL_JOB_STATUSES:
        return False
    if github_status_id is not None:
        last = job.last_github_status_id
        return last is None or github_status_id > last
    return at >= job.status_changed_at


def job_status_set(
    *, job: Job, status: str, at: datetime, actor: str, detail: str = ""
) -> None:
    """Moves a locked job to ``status`` (the caller decided that it applies): the transition
    row, and its key's record in step (``job_save``).

    A job that is, or is reported, ``running`` holds a lease of
    ``DEPLOY_RUNNING_LEASE_SECONDS`` from now (each running report renews it; it never
    shrinks): if neither its worker nor its reporter says more by then, the sweep fails it.
    Its key's progress deadline is that lease.

    ``detail`` is the reason of the latest transition (``""`` when it gave none); a report
    that changes nothing keeps the reason of the change it repeats unless it gives one."""
    previous = job.status
    job.status = status
    job.status_changed_at = at
    if detail or previous != status:
        job.detail = detail
    update_fields = ["status", "status_changed_at", "detail", "updated_at"]
    if status == JobStatus.RUNNING:
        lease = timezone.now() + timedelta(
            seconds=settings.DEPLOY_RUNNING_LEASE_SECONDS
        )
        job.lease_expires_at = max(lease, job.lease_expires_at or lease)
        update_fields.append("lease_expires_at")
    job_save(job=job, fields=update_fields)
    if previous != status:
        _transition_record(
            job=job,
            from_status=previous,
            to_status=status,
            at=at,
            actor=actor,
            detail=detail,
        )
    logger.info(
        "job.transition",
        extra={
            "job_id": job.public_id,
            "from_status": previous,
            "to_status": status,
            "actor": actor,
        },
    )


# The fields of a job its key's record follows (``job_key_mirror``).
_MIRRORED_FIELDS = frozenset(
    {"status", "lease_expires_at", "next_attempt_at", "trigger_phase", "executor"}
)


def job_save(*, job: Job, fields: list[str]) -> None:
    """Saves ``fields`` of a locked job: the one place that writes a job's state, so that
    its key's record follows whatever moved (``job_key_mirror``)."""
    job.save(update_fields=fields)
    if _MIRRORED_FIELDS.intersection(fields):
        job_key_mirror(job=job)


def job_key_mirror(*, job: Job) -> None:
    """Brings the job's idempotency record in step with the job, in the caller's
    transaction (docs/subsystems/idempotency.md, "A key's life"): ``succeeded`` or
    ``failed`` once the job is terminal, else the progress deadline the job's state gives
    (``_key_deadline``), if it gives one."""
    operation_type = OPERATION_TYPES[job.kind]
    if job.status in TERMINAL_JOB_STATUSES:
        idempotency_record_resolve(
            operation_type=operation_type,
            resource_id=job.public_id,
            succeeded=job.status == JobStatus.SUCCEEDED,
        )
        return
    deadline = _key_deadline(job)
    if deadline is not None:
        idempotency_record_progress_deadline_set(
            operation_type=operation_type, resource_id=job.public_id, deadline=deadline
        )


def _key_deadline(job: Job) -> datetime | None:
    """When a job that is not terminal must show progress, else its key is stuck: a running
    job, or an attempt in flight, by its lease; a trigger waiting for its retry, a lease
    after the retry's time; a job claimed by an ``external`` executor, a lease after its
    claim (its first report). ``None``: the deadline stays as it is (a job not claimed yet
    keeps the one of its creation, ``job_pickup_deadline``)."""
    lease = timedelta(seconds=settings.DEPLOY_RUNNING_LEASE_SECONDS)
    if job.status == JobStatus.RUNNING:
        return job.lease_expires_at
    if job.trigger_phase == TriggerPhase.SENT:
        return job.lease_expires_at
    if job.trigger_phase == TriggerPhase.RETRY_WAIT and job.next_attempt_at is not None:
        return job.next_attempt_at + lease
    if (
        job.trigger_phase == TriggerPhase.NONE
        and job.executor_started_at is not None
        and _waits_for_report(job)
    ):
        return job.executor_started_at + lease
    return None


def _waits_for_report(job: Job) -> bool:
    """Whether the job's executor calls nothing (``external``): neither runs nor triggers."""
    try:
        executor = executor_get(job.executor) if job.executor else None
    except UnknownExecutor:
        return False
    return executor is not None and not isinstance(
        executor, (RunExecutor, TriggerExecutor)
    )


def job_locked(*, kind: str, public_id: str) -> Job | None:
    return (
        JOB_MODELS[kind].objects.select_for_update().filter(public_id=public_id).first()
    )


def job_worker_lost_fail(*, job: Job, actor: str, now: datetime) -> None:
    if job.executor_started_at is None or job.executor_finished_at is not None:
        # Reported running by an external system (never run by a worker of ours, or reported
        # running again after our worker's result or trigger).
        detail = (
            f"{Reason.REPORT_LOST}: reported running, but no further report came within "
            "the lease"
        )
    else:
        detail = f"{Reason.WORKER_LOST}: the executor was started but never reported a result"
    job_status_set(job=job, status=JobStatus.FAILED, at=now, actor=actor, detail=detail)


def jobs_lost_fail(*, batch_size: int = 500) -> int:
    """Fails running jobs whose lease ran out: the worker that ran the executor died without a
    result, or the system that reported them running reported nothing more. Rows are taken
    with ``SKIP LOCKED``: overlapping sweeps never take the same job. Returns how many."""
    now = timezone.now()
    count = 0
    for model in JOB_MODELS.values():
        with transaction.atomic():
            lost = list(
                model.objects.select_for_update(skip_locked=True)
                .filter(status=JobStatus.RUNNING, lease_expires_at__lt=now)
                .order_by("lease_expires_at")[:batch_size]
            )
            for job in lost:
                job_worker_lost_fail(job=job, actor=SWEEP_ACTOR, now=now)
            count += len(lost)
    return count
