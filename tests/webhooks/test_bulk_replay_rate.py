"""Bulk replay at a rate, cancel and resume: the chain of paced tasks as the broker holds it
(each task applied here as a worker would), the operator actions they leave in the sealed
trail, the permission split between operators and auditors, and bad input in the admin and
the command. With real workers: test_bulk_replay_rate_worker.py."""

import getpass
import itertools
import re
import threading
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.sealer import ledger_rows_seal
from core.actors import Actor
from tests import processes
from tests.audit.tampering import sql, verify_fails
from tests.console import admin_action, make_user
from tests.webhooks.bulk_replay import (
    chunk_actions,
    dead_job,
    queued_tasks,
    replayed_ids,
)
from tests.webhooks.factories import DeadLetteredEventFactory, WebhookSourceFactory
from trail.models import OperatorAction
from webhooks.bulk_replay import (
    bulk_replay_job_cancel,
    bulk_replay_job_resume,
    bulk_replay_job_start,
)
from webhooks.errors import (
    BulkReplayJobNotCancellable,
    BulkReplayJobNotFound,
    InvalidBulkReplayRate,
)
from webhooks.models import BulkReplayJob, InboxEvent

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = "webhooks_bulkreplayjob"
ACTIONS = OperatorAction._meta.db_table
BAD_RATES = ["0", "-5", "abc", "1e400", "inf", "nan", "100000", "0.001", "1,5"]


@pytest.fixture
def paced(settings):
    settings.BULK_REPLAY_CHUNK_SIZE = 200
    settings.BULK_REPLAY_SLICE_SECONDS = 0
    settings.BULK_REPLAY_LEASE_SECONDS = 600
    settings.BULK_REPLAY_RATE_TICK_SECONDS = 0.5


def run_next_task():
    """Applies the one queued chunk task now, whatever its eta (as a worker whose clock ran
    ahead would): returns its (args, eta)."""
    from webhooks.tasks import bulk_replay_job_run_task

    [(args, eta)] = queued_tasks()
    processes.purge_broker()
    bulk_replay_job_run_task.apply(args=args)
    return args, eta


def control_actions(job):
    return OperatorAction.objects.filter(bulk_job=job).exclude(
        action=OperatorAction.Action.BULK_REPLAY
    )


def lock_waiters(table: str) -> int:
    """How many sessions of this database wait for a lock in a statement on ``table``, or
    for a bulk replay job's turn (``webhooks.bulk_replay._job_turn``, taken before the
    job's row)."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND (query LIKE %s OR wait_event = 'advisory')",
            [f"%{table}%"],
        )
        return cursor.fetchone()[0]


def changelist(http):
    return http.get(reverse(f"admin:{JOBS}_changelist")).content.decode()


# --- The chain of paced tasks -----------------------------------------------------------------


def test_each_slice_is_queued_for_its_due_time_half_a_second_apart_at_20_per_second(
    paced, operator, empty_broker
):
    job, dead = dead_job(35, rate=20)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))

    args, first_eta = run_next_task()
    assert (args, first_eta) == ([job.pk, 1, 0], None)  # the first slice: at once
    steps, etas = [], []
    while queued_tasks():
        args, eta = run_next_task()
        steps.append(args[2])
        etas.append(eta)

    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.SUCCEEDED
    # Slices of 10 (half a second at 20/s), the last one short, no empty task after it.
    assert [a.event_count for a in chunk_actions(job)] == [10, 10, 10, 5]
    assert steps == [1, 2, 3]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(etas)]
    assert gaps == pytest.approx([0.5, 0.5])
    assert sorted(replayed_ids(job)) == sorted(e.pk for e in dead)


def test_a_slice_larger_than_a_chunk_is_several_chunks_of_one_task(
    paced, settings, operator, empty_broker
):
    settings.BULK_REPLAY_CHUNK_SIZE = 4
    job, dead = dead_job(25, rate=20)  # slices of 10: chunks of 4, 4, 2
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    tasks = 0
    while queued_tasks():
        run_next_task()
        tasks += 1
    assert tasks == 3
    assert [a.event_count for a in chunk_actions(job)] == [4, 4, 2, 4, 4, 2, 4, 1]
    assert sorted(replayed_ids(job)) == sorted(e.pk for e in dead)


def test_a_task_delivered_twice_runs_once(paced, operator, empty_broker):
    from webhooks.tasks import bulk_replay_job_run_task

    job, _ = dead_job(30, rate=20)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    [(args, _)] = queued_tasks()
    processes.purge_broker()

    bulk_replay_job_run_task.apply(args=args)
    bulk_replay_job_run_task.apply(args=args)  # the broker delivered it again

    job.refresh_from_db()
    assert job.processed == 10
    assert [a for a, _ in queued_tasks()] == [[job.pk, 1, 1]]  # one chain, not two


def test_the_job_shows_its_rate_and_end_once_its_first_slices_ran(
    paced, operator, auditor_client, empty_broker
):
    job, _ = dead_job(100, rate=20)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    run_next_task()
    time.sleep(0.1)  # the second chunk ends after the first: a measure to show
    run_next_task()

    job.refresh_from_db()
    assert (job.state, job.processed, job.total) == ("running", 20, 100)
    measured = job.rate_measured()
    assert measured is not None
    # 80 left in slices of 10 every half second: the last one seven intervals after the next
    # slice is due (the second ran early, so that is half a second after its own due time),
    # or after now when this machine was slower than that. Only a machine so slow that the
    # measured rate fell under 90 % of the asked one makes it later: it follows the measure.
    now = timezone.now()
    end = job.finish_estimated(now=now)
    by_schedule = max(now, job.next_chunk_at) + timedelta(seconds=3.5)
    assert end == by_schedule or (measured < 0.9 * 20 and end > by_schedule)
    page = changelist(auditor_client)
    assert "20/100" in page
    assert "/ 20/s" in page  # measured / asked
    # The page estimates at its own instant: the minute of one of the two around it.
    minutes = {
        f"{timezone.localtime(at):%Y-%m-%d %H:%M}"
        for at in (end, job.finish_estimated())
    }
    assert any(minute in page for minute in minutes)
    detail = auditor_client.get(
        reverse(f"admin:{JOBS}_change", args=[job.pk])
    ).content.decode()
    assert "20/100" in detail and "/ 20/s" in detail
    assert "Start bulk replay by operator" in detail


# --- Cancel and resume ------------------------------------------------------------------------


def test_a_cancelled_job_stops_and_resumes_where_it_stopped_at_its_rate(
    paced, operator, empty_broker
):
    job, dead = dead_job(40, rate=20)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    run_next_task()
    run_next_task()

    cancelled = bulk_replay_job_cancel(
        job_id=job.pk,
        reason="downstream is struggling",
        cancelled_by=Actor.of(operator),
    )
    assert (cancelled.state, cancelled.processed) == ("cancelled", 20)
    run_next_task()  # the slice queued before the cancel does nothing
    assert queued_tasks() == []
    job.refresh_from_db()
    assert (job.state, job.processed) == ("cancelled", 20)
    done = replayed_ids(job)
    assert InboxEvent.objects.filter(processing_status="received").count() == 20
    untouched = InboxEvent.objects.exclude(pk__in=done)
    assert {(e.processing_status, e.attempts) for e in untouched} == {
        ("dead_lettered", 8)
    }

    resumer = make_user("resumer", "Operators")
    bulk_replay_job_resume(
        job_id=job.pk, resumed_by=Actor.of(resumer), reason="it is back"
    )
    while queued_tasks():
        run_next_task()
    job.refresh_from_db()
    assert (job.state, job.processed, job.rate) == ("succeeded", 40, 20)
    ids = replayed_ids(job)
    assert len(ids) == len(set(ids)) == 40
    assert set(ids) == {e.pk for e in dead}
    trail = [
        (a.action, a.actor_name, a.reason, a.details["rate"], a.details["processed"])
        for a in control_actions(job).order_by("pk")
    ]
    assert trail == [
        ("start_bulk_replay", "operator", "provider outage", 20, 0),
        ("cancel_bulk_replay", "operator", "downstream is struggling", 20, 20),
        ("resume_bulk_replay", "resumer", "it is back", 20, 20),
    ]


def test_a_resume_may_give_a_new_rate(paced, operator, empty_broker):
    job, _ = dead_job(30, rate=20)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    run_next_task()
    bulk_replay_job_cancel(
        job_id=job.pk, reason="too fast", cancelled_by=Actor.of(operator)
    )
    run_next_task()  # the next slice of the cancelled run: nothing

    bulk_replay_job_resume(
        job_id=job.pk, resumed_by=Actor.of(operator), reason="slower", rate=4
    )

    job.refresh_from_db()
    assert job.rate == 4
    resume = control_actions(job).get(action="resume_bulk_replay")
    assert (resume.details["rate"], resume.details["rate_changed"]) == (4, True)
    run_next_task()
    [(_, eta)] = queued_tasks()
    # Slices of 2 at 4/s: the next one due half a second after this one started.
    assert [a.event_count for a in chunk_actions(job)] == [10, 2]
    assert eta is not None


def test_an_unpaced_job_is_cancelled_between_its_tasks(
    settings, operator, empty_broker
):
    settings.BULK_REPLAY_CHUNK_SIZE = 4
    settings.BULK_REPLAY_SLICE_SECONDS = 0
    job, _ = dead_job(10)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    run_next_task()
    bulk_replay_job_cancel(
        job_id=job.pk, reason="wrong filter", cancelled_by=Actor.of(operator)
    )
    run_next_task()
    job.refresh_from_db()
    assert (job.state, job.processed) == ("cancelled", 4)


@pytest.mark.parametrize("state", ["counted", "succeeded", "failed", "cancelled"])
def test_only_a_queued_or_running_job_is_cancelled(state, paced, operator):
    job, _ = dead_job(3)
    BulkReplayJob.objects.filter(pk=job.pk).update(state=state)
    with pytest.raises(BulkReplayJobNotCancellable):
        bulk_replay_job_cancel(
            job_id=job.pk, reason="x", cancelled_by=Actor.of(operator)
        )
    assert BulkReplayJob.objects.get(pk=job.pk).state == state
    assert not control_actions(job).exists()
    with pytest.raises(BulkReplayJobNotFound):
        bulk_replay_job_cancel(
            job_id=999999, reason="x", cancelled_by=Actor.of(operator)
        )


def test_a_cancel_waits_for_the_chunk_at_work_and_nothing_runs_after_it(
    paced, settings, operator, empty_broker, monkeypatch
):
    """The chunk holds the job's row lock until it commits: the cancel waits for it, its rows
    stay replayed, and no chunk runs after it."""
    from webhooks import bulk_replay
    from webhooks.tasks import bulk_replay_job_run_task

    settings.BULK_REPLAY_CHUNK_SIZE = 5
    job, _ = dead_job(30)  # no rate: a task would go on chunk after chunk
    settings.BULK_REPLAY_SLICE_SECONDS = 60
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    [(args, _)] = queued_tasks()
    processes.purge_broker()
    in_chunk, release = threading.Event(), threading.Event()
    real_replay = bulk_replay.inbox_events_replay

    def slow_replay(**kwargs):
        action = real_replay(**kwargs)
        in_chunk.set()
        release.wait(10)
        return action

    monkeypatch.setattr(bulk_replay, "inbox_events_replay", slow_replay)

    def worker():
        try:
            bulk_replay_job_run_task.apply(args=args)
        finally:
            connections.close_all()

    cancelled = []

    def cancel():
        try:
            cancelled.append(
                bulk_replay_job_cancel(
                    job_id=job.pk, reason="stop", cancelled_by=Actor.of(operator)
                )
            )
        finally:
            connections.close_all()

    chunk = threading.Thread(target=worker)
    chunk.start()
    assert in_chunk.wait(10)
    canceller = threading.Thread(target=cancel)
    canceller.start()
    # The chunk is released only once the cancel is seen waiting for the job's row lock:
    # on a busy machine a release on a timer could let a second chunk in first.
    processes.wait_until(
        lambda: lock_waiters(JOBS), timeout=10, interval=0.02, what="a blocked cancel"
    )
    assert not cancelled  # it waits for the chunk's commit
    release.set()
    chunk.join(10)
    canceller.join(10)

    [cancelled] = cancelled
    assert cancelled.processed == 5
    job.refresh_from_db()
    assert (job.state, job.processed) == ("cancelled", 5)
    assert [a.event_count for a in chunk_actions(job)] == [5]
    assert queued_tasks() == []


# --- The admin: operators act, auditors look ---------------------------------------------------


def test_an_operator_creates_a_job_at_a_rate_in_the_admin(paced, operator_client):
    source = WebhookSourceFactory()
    DeadLetteredEventFactory.create_batch(3, source=source)
    response = operator_client.post(
        reverse(f"admin:{JOBS}_add"),
        {
            "source": source.pk,
            "status": "dead_lettered",
            "rate": "12.5",
            "reason": "incident 42",
        },
        follow=True,
    )
    assert b"Dry run: 3 event(s) match" in response.content
    job = BulkReplayJob.objects.get()
    assert (job.rate, job.dry_run_count) == (12.5, 3)


# A refusal that writes nothing needs no commit to be seen: these run in the test's
# transaction, which is cheaper than emptying every table after each of them.
@pytest.mark.django_db
@pytest.mark.parametrize("rate", BAD_RATES)
def test_a_bad_rate_in_the_admin_form_is_a_form_error_and_creates_nothing(
    rate, paced, operator_client
):
    source = WebhookSourceFactory()
    response = operator_client.post(
        reverse(f"admin:{JOBS}_add"),
        {"source": source.pk, "status": "dead_lettered", "rate": rate, "reason": "r"},
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["rate"]
    assert not BulkReplayJob.objects.exists()


def test_an_operator_cancels_and_resumes_from_the_admin_with_a_reason(
    paced, operator, operator_client, empty_broker
):
    job, _ = dead_job(30, rate=20)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    run_next_task()

    page = admin_action(operator_client, JOBS, "cancel_selected", job)
    assert b'name="reason"' in page.content  # asks why first
    assert BulkReplayJob.objects.get(pk=job.pk).state == "running"
    response = admin_action(
        operator_client,
        JOBS,
        "cancel_selected",
        job,
        post="yes",
        reason="downstream asked",
        follow=True,
    )
    assert b"Cancelled 1 bulk replay job" in response.content
    assert BulkReplayJob.objects.get(pk=job.pk).state == "cancelled"

    response = admin_action(
        operator_client,
        JOBS,
        "resume_selected",
        job,
        post="yes",
        reason="downstream is fine",
        rate="40",
        follow=True,
    )
    assert b"Resumed 1 bulk replay job" in response.content
    job.refresh_from_db()
    assert (job.state, job.rate, job.run) == ("queued", 40, 2)
    assert sorted(control_actions(job).values_list("action", "reason")) == [
        ("cancel_bulk_replay", "downstream asked"),
        ("resume_bulk_replay", "downstream is fine"),
        ("start_bulk_replay", "provider outage"),
    ]


def job_page_controls(http, job) -> list[str]:
    """The job controls its admin page offers: the list's actions, each for this job."""
    page = http.get(reverse(f"admin:{JOBS}_change", args=[job.pk]))
    assert page.status_code == 200
    return re.findall(r'name="action" value="(\w+)"', page.content.decode())


def test_a_jobs_own_page_cancels_it_and_resumes_it(
    paced, operator, operator_client, auditor, empty_broker
):
    auditor_client = Client()
    auditor_client.force_login(auditor)
    job, _ = dead_job(30, rate=20)
    assert (
        job_page_controls(operator_client, job) == []
    )  # counted: start it from the list
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    run_next_task()
    assert job_page_controls(operator_client, job) == ["cancel_selected"]
    assert job_page_controls(auditor_client, job) == []

    # The page's button posts the list's action for this job: it asks why, then cancels.
    changelist = reverse(f"admin:{JOBS}_changelist")
    form = {"action": "cancel_selected", "_selected_action": str(job.pk), "index": "0"}
    page = operator_client.post(changelist, form)
    assert b'name="reason"' in page.content
    response = operator_client.post(
        changelist, {**form, "post": "yes", "reason": "from its page"}, follow=True
    )
    assert b"Cancelled 1 bulk replay job" in response.content
    assert job_page_controls(operator_client, job) == ["resume_selected"]
    assert job_page_controls(auditor_client, job) == []


@pytest.mark.parametrize("rate", BAD_RATES)
def test_a_bad_rate_at_resume_is_a_form_error_and_changes_nothing(
    rate, paced, operator, operator_client, empty_broker
):
    job, _ = dead_job(5, rate=20)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    bulk_replay_job_cancel(job_id=job.pk, reason="x", cancelled_by=Actor.of(operator))
    processes.purge_broker()
    actions = OperatorAction.objects.count()

    response = admin_action(
        operator_client, JOBS, "resume_selected", job, post="yes", reason="r", rate=rate
    )

    assert response.status_code == 200
    assert response.context["form"].errors["rate"]
    job.refresh_from_db()
    assert (job.state, job.rate, job.run) == ("cancelled", 20, 1)
    assert OperatorAction.objects.count() == actions
    assert queued_tasks() == []


def test_an_auditor_sees_jobs_rates_and_ends_but_cannot_start_cancel_or_resume(
    paced, operator, auditor_client, empty_broker
):
    counted, _ = dead_job(5, rate=20)
    running, _ = dead_job(30, rate=20)
    bulk_replay_job_start(job=running, started_by=Actor.of(operator))
    run_next_task()
    stopped, _ = dead_job(30, rate=20)
    bulk_replay_job_start(job=stopped, started_by=Actor.of(operator))
    bulk_replay_job_cancel(
        job_id=stopped.pk, reason="x", cancelled_by=Actor.of(operator)
    )
    processes.purge_broker()
    before = list(BulkReplayJob.objects.order_by("pk").values())
    actions = OperatorAction.objects.count()

    page = changelist(auditor_client)
    for action in ("start_selected", "cancel_selected", "resume_selected"):
        assert action not in page
    assert "10/30" in page and "/ 20/s" in page and "Ends (estimated)" in page
    assert "Add bulk replay job" not in page
    detail = auditor_client.get(
        reverse(f"admin:{JOBS}_change", args=[running.pk])
    ).content.decode()
    assert "10/30" in detail and "Ends (estimated)" in detail

    # Forged POSTs, confirmation pages answered, change nothing.
    for action, job in (
        ("start_selected", counted),
        ("cancel_selected", running),
        ("resume_selected", stopped),
    ):
        admin_action(
            auditor_client, JOBS, action, job, post="yes", reason="r", rate="5"
        )
    add = auditor_client.post(
        reverse(f"admin:{JOBS}_add"),
        {"status": "dead_lettered", "rate": "5", "reason": "r"},
    )
    assert add.status_code == 403
    assert list(BulkReplayJob.objects.order_by("pk").values()) == before
    assert OperatorAction.objects.count() == actions
    assert queued_tasks() == []


# --- The command ------------------------------------------------------------------------------


def test_replay_events_at_a_rate_never_goes_faster_and_shows_its_progress(
    paced, settings, capsys
):
    settings.BULK_REPLAY_RATE_TICK_SECONDS = 0.1
    source = WebhookSourceFactory(slug="papers")
    DeadLetteredEventFactory.create_batch(8, source=source)

    before = timezone.now()
    call_command("replay_events", "--source", "papers", "--rate", "20")

    out = capsys.readouterr().out
    assert "8/8" in out and "(asked 20/s)" in out
    assert "ends ~" in out
    job = BulkReplayJob.objects.get()
    assert (job.state, job.rate) == ("succeeded", 20)
    times = [a.created_at for a in chunk_actions(job)]
    assert [a.event_count for a in chunk_actions(job)] == [2, 2, 2, 2]
    # Four slices of 2 at 20/s: the last is due three intervals of 0.1 s after the first
    # slice began, which was after `before`; a busy machine only makes it later. (Less 5 ms:
    # these times are read on the wall clock, the command sleeps on the monotonic one.)
    assert (times[-1] - before).total_seconds() >= 0.3 - 0.005
    start = control_actions(job).get()
    assert (start.action, start.actor_name) == (
        "start_bulk_replay",
        f"os:{getpass.getuser()}",
    )
    assert start.details["rate"] == 20


@pytest.mark.django_db  # a refusal that writes nothing (see the admin form's above)
@pytest.mark.parametrize("rate", BAD_RATES)
def test_replay_events_refuses_a_bad_rate_and_creates_nothing(rate, paced):
    DeadLetteredEventFactory.create_batch(2)
    with pytest.raises(CommandError, match="rate"):
        call_command("replay_events", f"--rate={rate}")
    assert not BulkReplayJob.objects.exists()
    assert InboxEvent.objects.filter(processing_status="received").count() == 0


def test_replay_events_cancels_a_job_with_a_reason(paced, operator, capsys):
    job, _ = dead_job(5, rate=20)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator), publish=False)

    with pytest.raises(CommandError, match="--reason"):
        call_command("replay_events", "--cancel", str(job.pk))
    with pytest.raises(CommandError, match="only the job id"):
        call_command("replay_events", "--cancel", str(job.pk), "--rate", "3")
    assert BulkReplayJob.objects.get(pk=job.pk).state == "queued"

    call_command("replay_events", "--cancel", str(job.pk), "--reason", "incident 9")
    assert f"cancelled bulk replay #{job.pk}" in capsys.readouterr().out
    job.refresh_from_db()
    assert job.state == "cancelled"
    cancel = control_actions(job).get(action="cancel_bulk_replay")
    assert (cancel.actor_name, cancel.reason) == (
        f"os:{getpass.getuser()}",
        "incident 9",
    )
    with pytest.raises(CommandError, match="only a queued, running or paused job"):
        call_command("replay_events", "--cancel", str(job.pk), "--reason", "again")
    with pytest.raises(CommandError, match="no bulk replay"):
        call_command("replay_events", "--cancel", "999999", "--reason", "r")


def test_replay_events_resumes_a_cancelled_job_with_a_new_rate(paced, operator, capsys):
    job, dead = dead_job(6, rate=2)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator), publish=False)
    bulk_replay_job_cancel(job_id=job.pk, reason="x", cancelled_by=Actor.of(operator))

    with pytest.raises(CommandError, match="rate"):
        call_command("replay_events", "--resume", str(job.pk), "--rate", "0")
    assert BulkReplayJob.objects.get(pk=job.pk).state == "cancelled"

    call_command("replay_events", "--resume", str(job.pk), "--rate", "1000")
    job.refresh_from_db()
    assert (job.state, job.processed, job.rate) == ("succeeded", 6, 1000)
    assert "6/6" in capsys.readouterr().out
    assert sorted(replayed_ids(job)) == sorted(e.pk for e in dead)


@pytest.mark.slow
def test_a_job_the_command_runs_stops_when_cancelled_from_elsewhere(paced, operator):
    source = WebhookSourceFactory(slug="slow")
    DeadLetteredEventFactory.create_batch(6, source=source)
    cancelled = []

    def cancel_once_under_way():
        """Another operator, in the admin, once the first event (a slice of one at 1/s)
        is replayed: the cancel, a few milliseconds of work polled every 20 ms, has the
        second until the next slice is due (a bound with room for a busy machine)."""
        try:
            processes.wait_until(
                lambda: BulkReplayJob.objects.filter(processed__gte=1).exists(),
                timeout=10,
                interval=0.02,
            )
            cancelled.append(
                bulk_replay_job_cancel(
                    job_id=BulkReplayJob.objects.get().pk,
                    reason="from the admin",
                    cancelled_by=Actor.of(operator),
                )
            )
        finally:
            connections.close_all()

    thread = threading.Thread(target=cancel_once_under_way)
    thread.start()
    with pytest.raises(CommandError, match="was cancelled after 1/6"):
        call_command("replay_events", "--source", "slow", "--rate", "1")
    thread.join(10)
    assert [job.processed for job in cancelled] == [1]
    assert InboxEvent.objects.filter(processing_status="received").count() == 1


# --- The sealed trail -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["start_bulk_replay", "cancel_bulk_replay", "resume_bulk_replay"]
)
def test_audit_verify_names_an_altered_start_cancel_or_resume(
    kind, paced, operator, capsys, empty_broker
):
    job, _ = dead_job(5, rate=20)
    bulk_replay_job_start(job=job, started_by=Actor.of(operator))
    bulk_replay_job_cancel(
        job_id=job.pk, reason="stop", cancelled_by=Actor.of(operator)
    )
    bulk_replay_job_resume(
        job_id=job.pk, resumed_by=Actor.of(operator), reason="go", rate=40
    )
    ledger_rows_seal(now=timezone.now() + timedelta(minutes=5))
    call_command("audit_verify")
    assert "audit trail OK" in capsys.readouterr().out

    altered = control_actions(job).get(action=kind)
    sql(
        f"UPDATE {ACTIONS} SET details = jsonb_set(details, '{{rate}}', '1000') "  # noqa: S608
        "WHERE id = %s",
        [altered.pk],
    )

    err = verify_fails(capsys)
    assert f"ALTERED operator action {altered.pk}" in err
    assert err.count("ALTERED") == 1


def test_a_rate_out_of_range_is_refused_by_the_service_and_the_database(paced):
    with pytest.raises(InvalidBulkReplayRate):
        dead_job(1, rate=0)
    assert not BulkReplayJob.objects.exists()
    job, _ = dead_job(1, rate=5)
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        BulkReplayJob.objects.filter(pk=job.pk).update(rate=0)
