"""Races, with real threads on their own PostgreSQL connections and a real worker process."""

import pytest

from audit.log import log_root_recompute
from audit.models import LogLeaf
from audit.sealer import ledger_rows_seal
from audit.verification import log_verify
from core.actors import Actor
from core.relay.loop import Relay
from tests import processes
from tests.broker import broker_messages, queued_inbox_event_ids
from tests.threads import run_together
from tests.webhooks.factories import (
    DeadLetteredEventFactory,
    InboxEventFactory,
    WebhookSourceFactory,
)
from trail.models import OperatorAction
from webhooks.bulk_replay import bulk_replay_job_create
from webhooks.errors import NothingToReplay
from webhooks.models import BulkReplayJob, InboxEvent
from webhooks.replay import inbox_events_replay

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_replays_of_the_same_rows_replay_each_row_once(
    operator, empty_broker
):
    dead = DeadLetteredEventFactory.create_batch(30)
    ids = [e.pk for e in dead]

    def replay():
        return inbox_events_replay(
            events_queryset=InboxEvent.objects.filter(pk__in=ids),
            actor=Actor.of(operator),
            reason="race",
        ).event_count

    results, errors = run_together([replay] * 4)

    assert all(isinstance(e, NothingToReplay) for e in errors), errors
    assert sum(results) == 30
    assert (
        InboxEvent.objects.filter(pk__in=ids, processing_status="received").count()
        == 30
    )
    replayed = [pk for a in OperatorAction.objects.all() for pk in a.event_ids]
    assert sorted(replayed) == sorted(ids)  # every row in exactly one action
    assert (
        broker_messages() == []
    )  # a replay publishes nothing: the relay does, once per row
    Relay().run_once(sweep=False)
    Relay().run_once(sweep=False)
    assert sorted(queued_inbox_event_ids()) == sorted(ids)


def test_concurrent_sealers_log_each_row_once_in_one_tree(settings):
    from datetime import timedelta

    from django.utils import timezone

    settings.AUDIT_SEAL_BATCH_SIZE = 7
    events = InboxEventFactory.create_batch(
        40, received_at=timezone.now() - timedelta(minutes=10)
    )

    results, errors = run_together([lambda: ledger_rows_seal().leaves] * 3)
    later = (
        ledger_rows_seal().leaves
    )  # whatever a sealer that lost the lock left behind

    assert errors == []
    # The 40 rows, and the entry of the first round that retired the (empty) HMAC chain.
    assert sum(results) + later == LogLeaf.objects.count() == 41
    assert sorted(
        LogLeaf.objects.filter(kind="inbox_event").values_list("record_id", flat=True)
    ) == sorted(e.pk for e in events)
    assert log_root_recompute().ok
    report = log_verify()
    assert report.ok, report.problems
    assert report.checked["inbox_event"] == 40


@pytest.mark.slow
def test_bulk_replay_job_runs_on_a_real_worker_with_visible_progress(
    workers, operator, settings
):
    source = WebhookSourceFactory()
    DeadLetteredEventFactory.create_batch(12, source=source)
    job = bulk_replay_job_create(
        source=source,
        status="dead_lettered",
        since=None,
        event_ids=[],
        reason="worker run",
        created_by=Actor.of(operator),
    )
    assert job.dry_run_count == 12
    worker = workers.start(env={"BULK_REPLAY_CHUNK_SIZE": "5"})
    try:
        from webhooks.bulk_replay import bulk_replay_job_start

        bulk_replay_job_start(job=job, started_by=Actor.system())
        processes.wait_until(
            lambda: (
                BulkReplayJob.objects.get(pk=job.pk).state
                in (BulkReplayJob.State.SUCCEEDED, BulkReplayJob.State.FAILED)
            ),
            timeout=60,
            what="the worker to run the bulk replay job",
        )
    finally:
        worker.stop()
    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.SUCCEEDED, worker.log()[-2000:]
    assert (job.processed, job.total) == (12, 12)
    chunks = list(
        OperatorAction.objects.filter(bulk_job=job, action="bulk_replay")
        .order_by("pk")
        .values_list("event_count", flat=True)
    )
    assert chunks == [5, 5, 2]
    # And the start itself, recorded once.
    assert (
        OperatorAction.objects.filter(bulk_job=job, action="start_bulk_replay").count()
        == 1
    )
    assert not InboxEvent.objects.filter(
        source=source, processing_status="dead_lettered"
    ).exists()
