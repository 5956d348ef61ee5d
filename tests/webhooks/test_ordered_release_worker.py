"""A document's events released from a backlog (a paused source's drain, a bulk replay) make
their revisions in version order with REAL processes: two Celery workers, each with its own
relay, both relays publishing (``RELAY_ONE_ACTIVE`` off: two relays claim at once). Released
apart, two workers could apply a later version first, and the earlier one would then be
``ignored_out_of_order``: its revision never written (docs/subsystems/relay.md, "One document's
events in order")."""

from __future__ import annotations

import pytest

from core.actors import Actor
from core.relay.loop import Relay
from research.models import DocumentRevision
from tests import processes
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import inbox_events_bulk_create, research_source
from webhooks.bulk_replay import bulk_replay_job_create, bulk_replay_job_start
from webhooks.models import (
    TERMINAL_STATUSES,
    BulkReplayJob,
    InboxEvent,
    ProcessingStatus,
)
from webhooks.pausing import webhook_source_pause, webhook_source_resume

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
]

# Both relays publish, each for its own worker's one process (its claims and its in-flight
# room of RELAY_IN_FLIGHT_LIMIT rows are its own).
TWO_RELAYS = {"RELAY_ONE_ACTIVE": "false", "RELAY_HEARTBEAT_SECONDS": "0.5"}


def interleaved_versions(documents: list[str], versions: int) -> list[dict]:
    """v1 of every document, then v2 of every document, and so on: the order a producer
    that updates several documents at once delivers them in."""
    return [
        research_event(entity_id=document, source_version=version)
        for version in range(1, versions + 1)
        for document in documents
    ]


def two_workers(workers, env: dict[str, str]) -> None:
    for name in ("w1", "w2"):
        workers.start(concurrency=1, name=name, env={**TWO_RELAYS, **env})
    workers.ready()


def wait_all_terminal(workers, source, count: int, *, timeout: float = 120) -> None:
    """Until every event of ``source`` is terminal, and none dead-lettered (a replay's
    events are, until the job replays them)."""

    def done() -> bool:
        return (
            InboxEvent.objects.filter(
                source=source, processing_status__in=TERMINAL_STATUSES
            )
            .exclude(processing_status=ProcessingStatus.DEAD_LETTERED)
            .count()
            == count
        )

    workers.wait_until(
        done, timeout=timeout, interval=0.2, what=f"{count} events terminal"
    )


def assert_every_version_made_its_revision_in_order(
    source, documents: list[str], versions: int
) -> None:
    statuses = {}
    for status in InboxEvent.objects.filter(source=source).values_list(
        "processing_status", flat=True
    ):
        statuses[status] = statuses.get(status, 0) + 1
    assert statuses == {ProcessingStatus.PROCESSED: len(documents) * versions}, statuses
    for document in documents:
        made = list(
            DocumentRevision.objects.filter(document__entity_id=document)
            .order_by("pk")
            .values_list("source_version", flat=True)
        )
        assert made == list(range(1, versions + 1)), (document, made)


@pytest.mark.parametrize("rate", [None, 200.0], ids=["no-rate", "200-per-second"])
def test_a_documents_held_versions_make_their_revisions_in_order_two_workers_two_relays(
    workers, rate
):
    """Four documents with 70 held versions each (more than one message of INBOX_BATCH_SIZE,
    50, holds), resumed with and without a rate: every version makes its revision, in
    version order."""
    documents, versions = [f"doc_held_{n}" for n in range(4)], 70
    paused = research_source("paused-sync")
    webhook_source_pause(source=paused, reason="indexer down", actor=Actor.system())
    inbox_events_bulk_create(interleaved_versions(documents, versions), source=paused)
    Relay().run_once(sweep=False)  # sets them aside
    two_workers(workers, {})

    webhook_source_resume(source=paused, rate=rate, actor=Actor.system())
    wait_all_terminal(workers, paused, len(documents) * versions)

    assert_every_version_made_its_revision_in_order(paused, documents, versions)


def test_a_paced_bulk_replay_makes_every_revision_in_order_across_its_chunks(workers):
    """Two documents with 70 dead-lettered versions each, replayed at a rate in chunks of
    20: each document's versions are in four chunks a few milliseconds apart (the schedule
    lets several chunks go in one slice), each published by whichever relay claims it
    first, and processed by two workers."""
    documents, versions = ["doc_dead_a", "doc_dead_b"], 70
    source = research_source("replayed-sync")
    inbox_events_bulk_create(
        [
            research_event(entity_id=document, source_version=version)
            for document in documents
            for version in range(1, versions + 1)
        ],
        source=source,
        processing_status=ProcessingStatus.DEAD_LETTERED,
        attempts=8,
        error_message="search index unavailable",
        dead_letter_cause="exhausted",
    )
    two_workers(workers, {"BULK_REPLAY_CHUNK_SIZE": "20"})
    job = bulk_replay_job_create(
        source=source,
        status=ProcessingStatus.DEAD_LETTERED,
        since=None,
        event_ids=[],
        reason="the search index is back",
        rate=1000,
        created_by=Actor.system(),
    )
    bulk_replay_job_start(job=job, started_by=Actor.system())

    processes.wait_until(
        lambda: (
            BulkReplayJob.objects.get(pk=job.pk).state == BulkReplayJob.State.SUCCEEDED
        ),
        timeout=60,
        what="the job to finish",
    )
    wait_all_terminal(workers, source, len(documents) * versions)
    assert_every_version_made_its_revision_in_order(source, documents, versions)
