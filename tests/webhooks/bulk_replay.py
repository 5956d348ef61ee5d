"""What the bulk replay tests share: a job over dead letters of a source of its own, and what
its operator actions and the broker say of it."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser

from core.actors import Actor
from tests.broker import broker_messages
from tests.webhooks.factories import DeadLetteredEventFactory, WebhookSourceFactory
from trail.models import OperatorAction
from webhooks.bulk_replay import bulk_replay_job_create
from webhooks.dispatch import BULK_REPLAY_TASK
from webhooks.models import BulkReplayJob, InboxEvent


def dead_job(
    n: int,
    *,
    rate: float | None = None,
    creator: AbstractBaseUser | None = None,
    reason: str = "provider outage",
) -> tuple[BulkReplayJob, list[InboxEvent]]:
    """A job over ``n`` dead letters of a new source, created by ``creator`` (else by the
    system), with its dry-run count."""
    source = WebhookSourceFactory()
    dead = DeadLetteredEventFactory.create_batch(n, source=source)
    job = bulk_replay_job_create(
        source=source,
        status="dead_lettered",
        since=None,
        event_ids=[],
        reason=reason,
        rate=rate,
        created_by=Actor.of(creator) if creator else Actor.system(),
    )
    assert job.dry_run_count == n
    return job, dead


def chunk_actions(job: BulkReplayJob) -> list[OperatorAction]:
    """The job's ``bulk_replay`` actions, one per chunk, in order."""
    return list(
        OperatorAction.objects.filter(
            bulk_job=job, action=OperatorAction.Action.BULK_REPLAY
        ).order_by("pk")
    )


def replayed_ids(job: BulkReplayJob) -> list[int]:
    """Every inbox row the job's chunks replayed, in order."""
    return [pk for action in chunk_actions(job) for pk in action.event_ids]


def finished(job: BulkReplayJob) -> bool:
    return BulkReplayJob.objects.get(pk=job.pk).state in (
        BulkReplayJob.State.SUCCEEDED,
        BulkReplayJob.State.FAILED,
    )


def queued_tasks() -> list[tuple[list, datetime | None]]:
    """The chunk tasks waiting in the broker: (args, eta or None)."""
    found = []
    for message in broker_messages():
        if message["task"] == BULK_REPLAY_TASK:
            eta = message["headers"].get("eta")
            found.append((message["args"], eta and datetime.fromisoformat(eta)))
    return found
