"""Bulk replay at a rate on a REAL Celery worker: the rate measured from the replayed rows'
operator actions is the rate asked (on Redis and on RabbitMQ); a job cancelled mid-run stops
after its current chunk, leaves the rest untouched, and its resume replays exactly the rest;
and the command refuses a bad rate with a non-zero exit."""

import time

import pytest

from core.actors import Actor
from tests import processes
from tests.console import make_user
from tests.webhooks.bulk_replay import chunk_actions, dead_job, finished
from tests.webhooks.factories import DeadLetteredEventFactory
from trail.models import OperatorAction
from webhooks.bulk_replay import (
    bulk_replay_job_cancel,
    bulk_replay_job_resume,
    bulk_replay_job_start,
)
from webhooks.dispatch import BULK_REPLAY_TASK
from webhooks.models import BulkReplayJob, InboxEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORKER_ENV = {
    "BULK_REPLAY_CHUNK_SIZE": "200",
    "BULK_REPLAY_RATE_TICK_SECONDS": "0.5",
    "INBOX_MAX_ATTEMPTS": "1",
}


def rate_of(actions):
    """Events per second from the first replay to the last: the first one's events took no
    time and are not counted."""
    seconds = (actions[-1].created_at - actions[0].created_at).total_seconds()
    return (sum(a.event_count for a in actions) - actions[0].event_count) / seconds


def most_in_any_second(actions):
    return max(
        sum(
            b.event_count
            for b in actions
            if 0 <= (b.created_at - a.created_at).total_seconds() < 1
        )
        for a in actions
    )


@pytest.mark.parametrize("rate", [20])
def test_a_job_at_a_rate_replays_at_that_rate_on_a_real_worker(
    workers, operator, broker_url, rate
):
    from config.celery_app import app

    job, dead = dead_job(60, rate=rate)
    worker = workers.start(
        concurrency=2, env={**WORKER_ENV, "CELERY_BROKER_URL": broker_url}
    )
    try:
        job = bulk_replay_job_start(
            job=job, started_by=Actor.of(operator), publish=False
        )
        with app.connection_for_write(broker_url) as connection:
            app.send_task(
                BULK_REPLAY_TASK, args=[job.pk, job.run, 0], connection=connection
            )
        processes.wait_until(
            lambda: finished(job), timeout=90, what="the paced job to finish"
        )
    finally:
        worker.stop()

    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.SUCCEEDED, worker.log()[-3000:]
    assert job.processed == 60
    actions = chunk_actions(job)
    assert sorted(pk for a in actions for pk in a.event_ids) == sorted(
        e.pk for e in dead
    )
    measured = rate_of(actions)
    print(f"asked {rate}/s, measured {measured:.2f}/s over {len(actions)} slices")
    # Never faster than asked (a fifth over for where the first slice's end falls). Slower
    # only by what a busy machine costs: a task that starts more than an interval late starts
    # the schedule again from then (webhooks/pacing.py), so half the rate is the bound kept.
    for figure in (measured, job.rate_measured()):
        assert rate * 0.5 <= figure <= rate * 1.2, figure
    # No burst at the start, nor anywhere: half a second's worth at a time.
    assert actions[0].event_count <= rate * 0.5
    assert most_in_any_second(actions) <= rate * 1.5


def test_a_job_cancelled_mid_run_stops_and_its_resume_replays_exactly_the_rest(
    workers, operator, roles
):
    job, dead = dead_job(200, rate=40)
    before = {
        row["pk"]: row
        for row in InboxEvent.objects.values(
            "pk", "processing_status", "attempts", "error_message", "dispatched_at"
        )
    }
    # No relay: a replayed row stays `received`, so what the job did is plain to see.
    env = {**WORKER_ENV, "RELAY_ENABLED": "false"}
    worker = workers.start(env=env)
    try:
        bulk_replay_job_start(job=job, started_by=Actor.of(operator))
        processes.wait_until(
            lambda: BulkReplayJob.objects.get(pk=job.pk).processed >= 40,
            timeout=60,
            interval=0.02,
            what="the job to be under way",
        )
        cancelled = bulk_replay_job_cancel(
            job_id=job.pk,
            reason="downstream is struggling",
            cancelled_by=Actor.of(operator),
        )
        at_cancel = cancelled.processed
        time.sleep(1.5)  # three slices' worth: none of them runs
        job.refresh_from_db()
        assert (job.state, job.processed) == ("cancelled", at_cancel)
        assert 40 <= at_cancel < 200
        first_run = [pk for a in chunk_actions(job) for pk in a.event_ids]
        assert len(first_run) == at_cancel
        received = set(
            InboxEvent.objects.filter(processing_status="received").values_list(
                "pk", flat=True
            )
        )
        assert received == set(first_run)
        for row in InboxEvent.objects.exclude(pk__in=first_run).values(
            "pk", "processing_status", "attempts", "error_message", "dispatched_at"
        ):
            assert row == before[row["pk"]]  # untouched

        resumer = make_user("resumer", "Operators")
        bulk_replay_job_resume(
            job_id=job.pk, resumed_by=Actor.of(resumer), reason="downstream is fine"
        )
        processes.wait_until(
            lambda: finished(job), timeout=90, what="the resumed job to finish"
        )
    finally:
        worker.stop()

    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.SUCCEEDED, worker.log()[-3000:]
    assert (job.processed, job.rate) == (200, 40)
    actions = chunk_actions(job)
    ids = [pk for a in actions for pk in a.event_ids]
    assert len(ids) == len(set(ids)) == 200  # nothing replayed twice
    assert set(ids) == {e.pk for e in dead}
    resumed = [a for a in actions if a.actor_name == "resumer"]
    assert {pk for a in resumed for pk in a.event_ids} == {e.pk for e in dead} - set(
        first_run
    )
    # The resumed run kept the job's rate.
    measured = rate_of(resumed)
    print(f"resumed run: asked 40/s, measured {measured:.2f}/s")
    assert measured == pytest.approx(40, rel=0.2)
    kinds = list(
        OperatorAction.objects.filter(bulk_job=job)
        .exclude(action=OperatorAction.Action.BULK_REPLAY)
        .order_by("pk")
        .values_list("action", "actor_name", "details__processed")
    )
    assert kinds == [
        ("start_bulk_replay", "operator", 0),
        ("cancel_bulk_replay", "operator", at_cancel),
        ("resume_bulk_replay", "resumer", at_cancel),
    ]


@pytest.mark.parametrize("rate", ["0", "-1", "abc", "1e9", "nan"])
def test_replay_events_in_a_shell_refuses_a_bad_rate_with_a_non_zero_exit(rate):
    DeadLetteredEventFactory.create_batch(2)
    result = processes.manage(
        "replay_events", f"--rate={rate}", env=processes.child_env()
    )
    assert result.returncode != 0
    assert "rate" in result.stderr
    assert "Traceback" not in result.stderr
    assert not BulkReplayJob.objects.exists()
    assert not InboxEvent.objects.filter(processing_status="received").exists()
