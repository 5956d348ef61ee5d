"""Jobs as an outbox (docs/subsystems/relay.md): a new deployment or build is
committed with its idempotency record and answered; the relay (``core.relay``) in each worker
publishes its run message. Nothing on the request path talks to the broker.

A job waits for its message while it is ``queued`` with no message published yet
(``last_dispatched_at`` null): a new job (not claimed yet), read through a partial index that
holds only such jobs, or a trigger job whose retry came due (``next_attempt_at``), read
through a second partial index that holds only the jobs waiting for a retry. A worker that
schedules a retry clears ``last_dispatched_at``: the retry waits in the database, holding no
worker, and the relay publishes it once due, as it does for the inbox's retries.

The sweep publishes again a queued job whose message was lost (no worker started it within
``DEPLOY_REDISPATCH_AFTER_SECONDS``), a trigger job whose attempt's worker was lost (its lease
ran out with no outcome) or whose retry message was lost, and fails a running job whose lease
ran out."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.relay.outbox import Outbox, Publication

from .models import Job, JobStatus, TriggerPhase
from .services.jobs import JOB_MODELS, RUN_JOB_TASK, jobs_lost_fail


def _waiting(model: type[Job]) -> QuerySet:
    """New jobs waiting for their first message (``*_outbox_idx``)."""
    return model.objects.filter(
        status=JobStatus.QUEUED,
        executor_started_at__isnull=True,
        last_dispatched_at__isnull=True,
    )


def _retries_due(model: type[Job], now: datetime) -> QuerySet:
    """Trigger jobs whose retry came due and waits for its message (``*_retry_idx``)."""
    return model.objects.filter(
        status=JobStatus.QUEUED,
        last_dispatched_at__isnull=True,
        next_attempt_at__isnull=False,
        next_attempt_at__lte=now,
    )


def _triggers_lost(model: type[Job], *, now: datetime, cutoff: datetime) -> QuerySet:
    """Trigger jobs whose message is gone: an attempt's worker was lost (its lease ran out
    with the attempt open) or the message of a due retry was lost; in both cases not
    published within ``DEPLOY_REDISPATCH_AFTER_SECONDS``. Served by ``*_sweep_idx``."""
    return model.objects.filter(
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now),
        Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now),
        status=JobStatus.QUEUED,
        executor_started_at__isnull=False,
        trigger_phase__in=[TriggerPhase.SENT, TriggerPhase.RETRY_WAIT],
        last_dispatched_at__lt=cutoff,
    )


def _take(
    querysets: dict[str, QuerySet], limit: int, *, order: str = "pk"
) -> list[Publication]:
    """Locks up to ``limit`` jobs that no other relay holds, in ``order``, stamps them
    dispatched and returns their run messages, each with its idempotency key as
    correlation id."""
    now = timezone.now()
    publications: list[Publication] = []
    for kind, queryset in querysets.items():
        if len(publications) >= limit:
            break
        jobs = list(
            queryset.select_for_update(skip_locked=True)
            .order_by(order)
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


# Stands for "now" in the statement ``JobOutbox.has_waiting`` builds once.
_NOW_MARKER = datetime(2000, 1, 1, tzinfo=UTC)


@functools.cache
def _has_waiting_statement() -> tuple[str, list, frozenset[int]]:
    """The probe statement of ``JobOutbox.has_waiting``, compiled from the querysets that
    define the waiting jobs (so that the two never disagree), with the positions of its
    time parameters. Compiling it costs more than running it: a relay polls dozens of times
    a second when idle."""
    probes = []
    params: list = []
    for model in JOB_MODELS.values():
        for queryset in (_waiting(model), _retries_due(model, _NOW_MARKER)):
            sql, probe_params = queryset.values("id")[:1].query.sql_with_params()
            probes.append(f"EXISTS({sql})")
            params.extend(probe_params)
    marker = connection.ops.adapt_datetimefield_value(_NOW_MARKER)
    now_at = frozenset(i for i, value in enumerate(params) if value == marker)
    return f"SELECT {' OR '.join(probes)}", params, now_at


class JobOutbox(Outbox[None]):
    """Deployments and builds: each queued job is one message of its own (no flow control),
    its idempotency key as correlation id; new jobs first, then due trigger retries. The
    sweep also fails running jobs whose lease ran out."""

    name = "jobs"

    def claim(self, limit: int) -> tuple[int, list[Publication]]:
        now = timezone.now()
        publications = _take(
            {kind: _waiting(model) for kind, model in JOB_MODELS.items()}, limit
        )
        if len(publications) < limit:
            # Soonest due first, along their index (``*_retry_idx``, ordered by
            # ``next_attempt_at``): in id order a claim read and sorted every due retry,
            # as the inbox's did (docs/subsystems/relay.md, "A round").
            publications += _take(
                {kind: _retries_due(model, now) for kind, model in JOB_MODELS.items()},
                limit - len(publications),
                order="next_attempt_at",
            )
        return len(publications), publications

    def sweep(self, limit: int) -> tuple[int, list[Publication]]:
        now = timezone.now()
        cutoff = now - timedelta(seconds=settings.DEPLOY_REDISPATCH_AFTER_SECONDS)
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
        if len(publications) < limit:
            publications += _take(
                {
                    kind: _triggers_lost(model, now=now, cutoff=cutoff)
                    for kind, model in JOB_MODELS.items()
                },
                limit - len(publications),
            )
        failed = jobs_lost_fail(batch_size=limit)
        return len(publications) + failed, publications

    def has_waiting(self) -> bool:
        """Four index probes (new jobs and due retries, of each kind) in one statement,
        outside any transaction: an idle relay takes no lock. The statement is built once
        per process; only the time changes."""
        sql, params, now_at = _has_waiting_statement()
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        bound = [
            now if index in now_at else value for index, value in enumerate(params)
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, bound)
            return bool(cursor.fetchone()[0])

    def oldest_waiting(self) -> datetime | None:
        oldest = [
            _waiting(model).order_by("pk").values_list("created_at", flat=True).first()
            for model in JOB_MODELS.values()
        ]
        return min((moment for moment in oldest if moment), default=None)

    def traceparents(self, publications: list[Publication]) -> list[tuple[str, ...]]:
        """Tracing only: each job's stored context (a message carries one job, its public
        id its second argument), one read for the round."""
        stored = dict(
            Job.objects.filter(
                public_id__in=[publication.args[1] for publication in publications]
            )
            .exclude(traceparent="")
            .values_list("public_id", "traceparent")
        )
        return [
            (stored[publication.args[1]],) if publication.args[1] in stored else ()
            for publication in publications
        ]


JOBS_OUTBOX = JobOutbox()
