"""An inbox event with a whole story, as the product writes it: delivered, delivered again
(identical duplicates and a conflicting copy), two attempts that dead-lettered it, a replay by
an operator, an attempt of that round that dead-lettered it again, a bulk replay job started by
another operator, and a real processing that applied it to its research document; then an
older version of the same document, which the document ignored (out of order)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import F
from django.utils import timezone

from core.actors import Actor
from research.models import DocumentRevision, ResearchDocument
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    FingerprintMismatchFactory,
    InboxAttemptFactory,
    InboxEventFactory,
)
from trail.models import OperatorAction
from webhooks.bulk_replay import (
    bulk_replay_job_create,
    bulk_replay_job_run,
    bulk_replay_job_start,
)
from webhooks.models import (
    BulkReplayJob,
    DeadLetterCause,
    FingerprintMismatch,
    InboxEvent,
    ProcessingStatus,
)
from webhooks.processing import inbox_event_process
from webhooks.replay import inbox_events_replay


@dataclass
class EventStory:
    event: InboxEvent
    mismatch: FingerprintMismatch
    replay: OperatorAction
    bulk_replay: OperatorAction
    job: BulkReplayJob
    document: ResearchDocument
    revision: DocumentRevision
    ignored: InboxEvent


def _dead_letter(event: InboxEvent, error: str) -> None:
    InboxEvent.objects.filter(pk=event.pk).update(
        processing_status=ProcessingStatus.DEAD_LETTERED,
        attempts=F("attempts") + 1,
        error_message=error,
        dead_letter_cause=DeadLetterCause.EXHAUSTED,
        processed_at=timezone.now(),
    )


def event_with_a_story(*, replayer, bulk_replayer, entity_id: str = "doc_story42"):
    start = timezone.now() - timedelta(minutes=10)
    event = InboxEventFactory(
        body=research_event(entity_id=entity_id, source_version=5),
        received_at=start,
        last_seen_at=start + timedelta(seconds=90),
        delivery_count=3,
        processing_status=ProcessingStatus.DEAD_LETTERED,
        attempts=2,
        error_message="handler exploded: the index is down",
        dead_letter_cause=DeadLetterCause.EXHAUSTED,
        processed_at=start + timedelta(minutes=3),
    )
    mismatch = FingerprintMismatchFactory(
        event=event, received_at=start + timedelta(seconds=30)
    )
    for number in (1, 2):
        InboxAttemptFactory(
            event=event,
            number=number,
            started_at=start + timedelta(minutes=number),
            finished_at=start + timedelta(minutes=number, seconds=1),
            outcome="retry" if number == 1 else "dead_lettered",
            resulting_status="failed" if number == 1 else "dead_lettered",
            error="the index is down",
        )
    replay = inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk=event.pk),
        actor=Actor.of(replayer),
        reason="index back up",
    )
    now = timezone.now()
    InboxAttemptFactory(
        event=event,
        number=1,
        started_at=now,
        finished_at=now,
        outcome="dead_lettered",
        resulting_status="dead_lettered",
        error="the index is down again",
    )
    _dead_letter(event, "the index is down again")
    job = bulk_replay_job_create(
        source=None,
        status=ProcessingStatus.DEAD_LETTERED,
        since=None,
        event_ids=[event.event_id],
        reason="second outage over",
        created_by=Actor.of(bulk_replayer),
    )
    job = bulk_replay_job_start(
        job=job, started_by=Actor.of(bulk_replayer), publish=False
    )
    bulk_replay_job_run(job_id=job.pk, run=job.run)
    bulk_replay = OperatorAction.objects.get(action="bulk_replay", bulk_job=job)
    outcome = inbox_event_process(inbox_event_id=event.pk, worker="w1@story")
    assert outcome.status == ProcessingStatus.PROCESSED, outcome
    event.refresh_from_db()
    revision = DocumentRevision.objects.get(inbox_event=event)
    ignored = InboxEventFactory(
        body=research_event(entity_id=entity_id, source_version=4),
    )
    outcome = inbox_event_process(inbox_event_id=ignored.pk, worker="w1@story")
    assert outcome.status == ProcessingStatus.IGNORED_OUT_OF_ORDER, outcome
    ignored.refresh_from_db()
    job.refresh_from_db()
    return EventStory(
        event=event,
        mismatch=mismatch,
        replay=replay,
        bulk_replay=bulk_replay,
        job=job,
        document=revision.document,
        revision=revision,
        ignored=ignored,
    )
