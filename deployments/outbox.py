"""Jobs as an outbox (docs/architecture.md, "Request paths"): a new deployment or build is
committed with its idempotency record and answered; the relay (``core.relay``) in each worker
publishes its run message. Nothing on the request path talks to the broker.

A job waits for its message while it is ``queued`` with no message published yet
(``last_dispatched_at`` null), read through a partial index that holds only such jobs. The
sweep publishes again a queued job whose message was lost (no worker started it within
``DEPLOY_REDISPATCH_AFTER_SECONDS``) and fails a running job whose lease ran out."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from core.relay import Outbox, Publication

from .models import Job, JobStatus
from .services import JOB_MODELS, RUN_JOB_TASK, jobs_lost_fail


def _waiting(model: type[Job]) -> QuerySet:
    return model.objects.filter(
        status=JobStatus.QUEUED,
        executor_started_at__isnull=True,
        last_dispatched_at__isnull=True,
    )


def _take(querysets: dict[str, QuerySet], limit: int) -> list[Publication]:
    """Locks up to ``limit`` jobs that no other relay holds, stamps them dispatched and
    returns their run messages, each with its idempotency key as correlation id."""
    now = timezone.now()
    publications: list[Publication] = []
    for kind, queryset in querysets.items():
        if len(publications) >= limit:
            break
        jobs = list(
            queryset.select_for_update(skip_locked=True)
            .order_by("pk")
            .values_list("pk", "public_id", "idempotency_key")[
                : limit - len(publications)
            ]
        )
        if jobs:
            JOB_MODELS[kind].objects.filter(pk__in=[pk for pk, _, _ in jobs]).update(
                last_dispatched_at=now
            )
        publications += [
            Publication(task=RUN_JOB_TASK, args=[kind, public_id], correlation_id=key)
            for _, public_id, key in jobs
        ]
    return publications


class JobOutbox(Outbox[None]):
    """Deployments and builds: each queued job is one message of its own (no flow control),
    its idempotency key as correlation id; the sweep also fails running jobs whose lease ran
    out."""

    name = "jobs"

    def claim(self, limit: int) -> tuple[int, list[Publication]]:
        publications = _take(
            {kind: _waiting(model) for kind, model in JOB_MODELS.items()}, limit
        )
        return len(publications), publications

    def sweep(self, limit: int) -> tuple[int, list[Publication]]:
        cutoff = timezone.now() - timedelta(
            seconds=settings.DEPLOY_REDISPATCH_AFTER_SECONDS
        )
        publications = _take(
            {
                kind: model.objects.filter(
                    status=JobStatus.QUEUED,
                    executor_started_at__isnull=True,
                    last_dispatched_at__lt=cutoff,
                )
                for kind, model in JOB_MODELS.items()
            },
            limit,
        )
        failed = jobs_lost_fail(batch_size=limit)
        return len(publications) + failed, publications

    def has_waiting(self) -> bool:
        return any(_waiting(model).exists() for model in JOB_MODELS.values())

    def oldest_waiting(self) -> datetime | None:
        oldest = [
            _waiting(model).order_by("pk").values_list("created_at", flat=True).first()
            for model in JOB_MODELS.values()
        ]
        return min((moment for moment in oldest if moment), default=None)


JOBS_OUTBOX = JobOutbox()
