"""A research document with every kind of event delivered for it, as the product writes
them (``doc42``): two versions applied (v1, v2), v3 whose data the handler rejected,
replayed by an operator and bulk-replayed by another, dead-lettered again each time (three
attempts in three rounds), a late v1 its ordering rule ignored (out of order) and a repeated
v2 (duplicate version), v4 failed and waiting for its retry (its source's dependency is
down), and v5 held by its paused source."""

from __future__ import annotations

from dataclasses import dataclass

from core.actors import Actor
from demo.services import SEARCH_INDEX, demo_dependency_ensure, demo_dependency_switch
from research.models import ResearchDocument
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    InboxEventFactory,
    WebhookSourceFactory,
    research_source,
)
from trail.models import OperatorAction
from webhooks.bulk_replay import (
    bulk_replay_job_create,
    bulk_replay_job_run,
    bulk_replay_job_start,
)
from webhooks.models import BulkReplayJob, InboxEvent
from webhooks.pausing import webhook_source_pause
from webhooks.processing import inbox_event_process
from webhooks.replay import inbox_events_replay

ENTITY = "doc42"
REJECTED = {"summary": "s", "authors": "not a list", "citations": []}


@dataclass
class DocumentStory:
    document: ResearchDocument
    events: dict[str, InboxEvent]  # by event id
    dead: InboxEvent  # v3
    replay: OperatorAction
    bulk_replay: OperatorAction
    job: BulkReplayJob


def _event(source, event_id: str, version: int, **members) -> InboxEvent:
    return InboxEventFactory(
        source=source,
        body=research_event(
            entity_id=ENTITY, source_version=version, event_id=event_id, **members
        ),
    )


def _processed(event: InboxEvent, status: str) -> None:
    outcome = inbox_event_process(inbox_event_id=event.pk, worker="w1@doc42")
    assert outcome.status == status, (event.event_id, outcome)


def document_with_every_kind_of_event(*, replayer, bulk_replayer) -> DocumentStory:
    papers = research_source("papers")
    _processed(_event(papers, "evt_doc42_1", 1), "processed")
    _processed(_event(papers, "evt_doc42_2", 2), "processed")
    dead = _event(papers, "evt_doc42_3", 3, data=REJECTED)
    _processed(dead, "dead_lettered")
    replay = inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk=dead.pk),
        actor=Actor.of(replayer),
        reason="the validation was relaxed",
        repeats_confirmed=True,
    )
    _processed(dead, "dead_lettered")
    job = bulk_replay_job_create(
        source=None,
        status="dead_lettered",
        since=None,
        event_ids=["evt_doc42_3"],
        reason="one more try overnight",
        created_by=Actor.of(bulk_replayer),
    )
    job = bulk_replay_job_start(
        job=job, started_by=Actor.of(bulk_replayer), publish=False
    )
    job = bulk_replay_job_run(job_id=job.pk, run=job.run)
    _processed(dead, "dead_lettered")
    bulk_replay = OperatorAction.objects.get(action="bulk_replay", bulk_job=job)
    _processed(_event(papers, "evt_doc42_1b", 1), "ignored_out_of_order")
    _processed(_event(papers, "evt_doc42_2b", 2), "ignored_duplicate_version")
    indexed = WebhookSourceFactory(slug="papers-indexed", handler="demo")
    demo_dependency_ensure(name=SEARCH_INDEX)
    demo_dependency_switch(
        name=SEARCH_INDEX, up=False, actor=Actor.system(), reason="index rebuild"
    )
    _processed(_event(indexed, "evt_doc42_4", 4), "failed")
    held_source = research_source("papers-held")
    webhook_source_pause(source=held_source, reason="downstream", actor=Actor.system())
    _event(held_source, "evt_doc42_5", 5)
    dead.refresh_from_db()
    return DocumentStory(
        document=ResearchDocument.objects.get(entity_id=ENTITY),
        events={e.event_id: e for e in InboxEvent.objects.filter(entity_id=ENTITY)},
        dead=dead,
        replay=replay,
        bulk_replay=bulk_replay,
        job=job,
    )
