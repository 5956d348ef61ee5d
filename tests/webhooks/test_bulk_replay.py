"""Bulk replay jobs: who started them, a chain of bounded tasks (each applied here as a worker
would, from the real broker's queue), resuming a failed or interrupted job where it stopped,
and resumes that race."""

import getpass
from datetime import timedelta

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from core.actors import Actor
from tests import processes
from tests.broker import broker_messages
from tests.console import make_user
from tests.threads import run_together
from tests.webhooks.bulk_replay import dead_job, replayed_ids
from tests.webhooks.factories import DeadLetteredEventFactory
from trail.models import OperatorAction
from webhooks.dispatch import BULK_REPLAY_TASK
from webhooks.models import BulkReplayJob, InboxEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def small_chunks(settings):
    settings.BULK_REPLAY_CHUNK_SIZE = 4
    settings.BULK_REPLAY_SLICE_SECONDS = 0  # one chunk per task
    settings.BULK_REPLAY_LEASE_SECONDS = 600


@pytest.fixture
def job_of_ten(operator, roles):
    """Ten dead letters of one source (two of another), in a job created by someone else
    than the operator who starts it."""
    job, dead = dead_job(10, creator=make_user("creator", "Operators"))
    DeadLetteredEventFactory.create_batch(2)
    return job, dead


def queued_chunks():
    return [m["args"] for m in broker_messages() if m["task"] == BULK_REPLAY_TASK]


def run_queued_chunks(limit=50):
    """Applies the queued chunk tasks one at a time, as one worker would, until none is left
    (each may queue the next); returns how many ran."""
    from webhooks.tasks import bulk_replay_job_run_task

    ran = 0
    while ran < limit:
        chunks = queued_chunks()
        processes.purge_broker()
        if not chunks:
            return ran
        for args in chunks:
            bulk_replay_job_run_task.apply(args=args)
            ran += 1
    raise AssertionError("the chain of chunk tasks did not end")


def start_from_admin(client, job):
    return client.post(
        reverse("admin:webhooks_bulkreplayjob_changelist"),
        {"action": "start_selected", ACTION_CHECKBOX_NAME: [job.pk]},
        follow=True,
    )


def resume_from_admin(client, job, **fields):
    """The "Resume selected jobs" action, its confirmation page answered with a reason (and
    the ``fields`` given, a new ``rate``)."""
    return client.post(
        reverse("admin:webhooks_bulkreplayjob_changelist"),
        {
            "action": "resume_selected",
            ACTION_CHECKBOX_NAME: [job.pk],
            "post": "yes",
            "reason": "the provider is back",
            **fields,
        },
        follow=True,
    )


def test_a_job_runs_as_a_chain_of_bounded_tasks_named_after_its_starter(
    small_chunks, job_of_ten, operator, operator_client, empty_broker
):
    job, dead = job_of_ten

    start_from_admin(operator_client, job)

    job.refresh_from_db()
    assert (job.state, job.started_by, job.started_by_name) == (
        BulkReplayJob.State.QUEUED,
        operator,
        "operator",
    )
    assert job.created_by_name == "creator"
    assert queued_chunks() == [[job.pk, job.run, 0]]
    # Each task does one chunk, commits the job's progress with it and queues the next.
    progress = []
    from webhooks.tasks import bulk_replay_job_run_task

    while chunks := queued_chunks():
        processes.purge_broker()
        [args] = chunks
        bulk_replay_job_run_task.apply(args=args)
        progress.append(BulkReplayJob.objects.get(pk=job.pk).processed)
    job.refresh_from_db()
    assert progress == [4, 8, 10]  # a short chunk is the last one
    assert job.state == BulkReplayJob.State.SUCCEEDED
    assert (job.processed, job.total) == (10, 10)
    actions = OperatorAction.objects.filter(
        bulk_job=job, action=OperatorAction.Action.BULK_REPLAY
    ).order_by("pk")
    assert [a.event_count for a in actions] == [4, 4, 2]
    assert {(a.actor, a.actor_name) for a in actions} == {(operator, "operator")}
    assert sorted(replayed_ids(job)) == sorted(e.pk for e in dead)


def test_the_admin_shows_who_created_and_who_started_a_job(
    small_chunks, job_of_ten, client, operator, auditor, empty_broker
):
    job, _ = job_of_ten
    # One client, logged in as each in turn (operator_client and auditor_client are the
    # same client: the second login would win).
    client.force_login(operator)
    start_from_admin(client, job)
    job.refresh_from_db()
    assert job.started_by_name == "operator"
    client.force_login(auditor)
    page = client.get(
        reverse("admin:webhooks_bulkreplayjob_changelist")
    ).content.decode()
    assert "creator<br>started by operator" in page
    detail = client.get(
        reverse("admin:webhooks_bulkreplayjob_change", args=[job.pk])
    ).content.decode()
    assert "creator" in detail and "operator" in detail


def test_a_failed_job_resumes_where_it_stopped_and_replays_nothing_twice(
    small_chunks, job_of_ten, operator, operator_client, empty_broker, monkeypatch
):
    from webhooks import bulk_replay

    job, dead = job_of_ten
    start_from_admin(operator_client, job)
    real_replay = bulk_replay.inbox_events_replay
    calls = []

    def replay_that_fails_the_second_time(**kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the database went away")
        return real_replay(**kwargs)

    monkeypatch.setattr(
        bulk_replay, "inbox_events_replay", replay_that_fails_the_second_time
    )
    run_queued_chunks()
    monkeypatch.undo()
    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.FAILED
    assert job.processed == 4
    assert "the database went away" in job.error
    first_chunk = replayed_ids(job)
    # Those rows failed again meanwhile: they match the filter again, but this job has
    # replayed them already.
    InboxEvent.objects.filter(pk__in=first_chunk).update(
        processing_status="dead_lettered"
    )

    resumer = make_user("resumer", "Operators")
    operator_client.force_login(resumer)
    response = resume_from_admin(operator_client, job)
    assert b"Resumed 1 bulk replay job" in response.content
    assert run_queued_chunks() == 2

    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.SUCCEEDED
    assert job.processed == 10
    ids = replayed_ids(job)
    assert sorted(ids) == sorted(e.pk for e in dead)  # each row exactly once
    actions = OperatorAction.objects.filter(
        bulk_job=job, action=OperatorAction.Action.BULK_REPLAY
    ).order_by("pk")
    assert [a.actor_name for a in actions] == ["operator", "resumer", "resumer"]
    assert (job.started_by_name, job.resumed_by_name) == ("operator", "resumer")


def test_a_running_job_is_resumable_only_once_its_lease_expired(
    small_chunks, job_of_ten, operator, operator_client, empty_broker
):
    from webhooks.bulk_replay import bulk_replay_job_resume
    from webhooks.errors import BulkReplayJobNotResumable

    job, dead = job_of_ten
    start_from_admin(operator_client, job)
    job.refresh_from_db()
    [stale] = queued_chunks()  # the worker holding this message dies before running it
    processes.purge_broker()
    with pytest.raises(BulkReplayJobNotResumable):
        bulk_replay_job_resume(job_id=job.pk, resumed_by=Actor.of(operator))

    BulkReplayJob.objects.filter(pk=job.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    resumed = bulk_replay_job_resume(job_id=job.pk, resumed_by=Actor.of(operator))
    assert resumed.run == job.run + 1
    # The message of the earlier run, delivered late, does nothing.
    from webhooks.tasks import bulk_replay_job_run_task

    bulk_replay_job_run_task.apply(args=stale)
    assert BulkReplayJob.objects.get(pk=job.pk).processed == 0
    run_queued_chunks()
    assert sorted(replayed_ids(job)) == sorted(e.pk for e in dead)


def test_two_resumes_at_once_run_the_job_once(
    small_chunks, job_of_ten, operator, empty_broker
):
    from webhooks.bulk_replay import bulk_replay_job_resume
    from webhooks.errors import BulkReplayJobNotResumable

    job, dead = job_of_ten
    BulkReplayJob.objects.filter(pk=job.pk).update(state="failed", run=1)

    results, errors = run_together(
        [lambda: bulk_replay_job_resume(job_id=job.pk, resumed_by=Actor.of(operator))]
        * 4
    )

    assert len(results) == 1, errors
    assert len(errors) == 3
    assert all(isinstance(e, BulkReplayJobNotResumable) for e in errors), errors
    assert queued_chunks() == [[job.pk, 2, 0]]
    run_queued_chunks()
    assert sorted(replayed_ids(job)) == sorted(e.pk for e in dead)


def test_replay_events_resumes_a_job_by_id(small_chunks, job_of_ten, capsys):
    job, dead = job_of_ten
    BulkReplayJob.objects.filter(pk=job.pk).update(state="failed", run=1)

    call_command("replay_events", "--resume", str(job.pk))

    out = capsys.readouterr().out
    assert "10/10" in out
    assert f"bulk replay #{job.pk}" in out
    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.SUCCEEDED
    assert job.resumed_by_name == f"os:{getpass.getuser()}"
    assert sorted(replayed_ids(job)) == sorted(e.pk for e in dead)
    with pytest.raises(CommandError, match="not resumable"):
        call_command("replay_events", "--resume", str(job.pk))
    with pytest.raises(CommandError, match="no bulk replay"):
        call_command("replay_events", "--resume", "999999")


def test_an_auditor_cannot_start_or_resume_a_job(
    small_chunks, job_of_ten, auditor_client, empty_broker
):
    job, _ = job_of_ten
    page = auditor_client.get(
        reverse("admin:webhooks_bulkreplayjob_changelist")
    ).content.decode()
    assert "start_selected" not in page
    assert "resume_selected" not in page

    start_from_admin(auditor_client, job)
    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.COUNTED
    BulkReplayJob.objects.filter(pk=job.pk).update(state="failed", run=1)
    resume_from_admin(auditor_client, job)
    job.refresh_from_db()
    assert (job.state, job.run) == (BulkReplayJob.State.FAILED, 1)
    assert queued_chunks() == []
    assert OperatorAction.objects.count() == 0
