"""Bulk replay jobs on a REAL Celery worker: a job many chunks long runs as a chain of tasks,
and a job whose worker is killed (-9) mid-way is resumed and finishes with every row replayed
exactly once."""

import re

import pytest
from django.utils import timezone

from core.actors import Actor
from tests import processes
from tests.console import make_user
from tests.webhooks.bulk_replay import dead_job, finished, replayed_ids
from trail.models import OperatorAction
from webhooks.bulk_replay import bulk_replay_job_resume, bulk_replay_job_start
from webhooks.dispatch import BULK_REPLAY_TASK
from webhooks.models import BulkReplayJob

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORKER_ENV = {
    "BULK_REPLAY_CHUNK_SIZE": "10",
    "BULK_REPLAY_SLICE_SECONDS": "0",
    "BULK_REPLAY_LEASE_SECONDS": "2",
    "INBOX_MAX_ATTEMPTS": "1",
}


def chunk_tasks_run(worker):
    return len(
        re.findall(
            rf"Task {re.escape(BULK_REPLAY_TASK)}\[[^\]]+\] received", worker.log()
        )
    )


def test_a_job_many_chunks_long_runs_as_a_chain_of_tasks_on_a_real_worker(
    workers, operator, roles
):
    creator = make_user("creator", "Operators")
    job, dead = dead_job(120, creator=creator)
    worker = workers.start(env=WORKER_ENV)
    try:
        bulk_replay_job_start(job=job, started_by=Actor.of(operator))
        processes.wait_until(
            lambda: finished(job), timeout=120, what="the bulk replay job to finish"
        )
    finally:
        worker.stop()
    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.SUCCEEDED, worker.log()[-3000:]
    assert (job.processed, job.total) == (120, 120)
    # One task per chunk of 10: the last chunk knows it is the last (no empty task after it).
    assert chunk_tasks_run(worker) == 12
    actions = OperatorAction.objects.filter(
        bulk_job=job, action=OperatorAction.Action.BULK_REPLAY
    )
    assert actions.count() == 12
    assert {(a.actor, a.actor_name) for a in actions} == {(operator, "operator")}
    assert sorted(replayed_ids(job)) == sorted(e.pk for e in dead)


def test_a_job_whose_worker_is_killed_mid_way_resumes_and_replays_every_row_once(
    workers, operator, roles
):
    job, dead = dead_job(200, creator=operator)
    worker = workers.start(env=WORKER_ENV)
    try:
        bulk_replay_job_start(job=job, started_by=Actor.of(operator))
        processes.wait_until(
            lambda: BulkReplayJob.objects.get(pk=job.pk).processed >= 30,
            timeout=60,
            interval=0.02,
            what="the job to be under way",
        )
        worker.kill()
    finally:
        worker.stop()
    job.refresh_from_db()
    assert job.state in (BulkReplayJob.State.QUEUED, BulkReplayJob.State.RUNNING)
    assert 30 <= job.processed < 200
    interrupted_at = job.processed

    def lease_over() -> bool:
        lease = BulkReplayJob.objects.get(pk=job.pk).lease_expires_at
        return lease is None or lease < timezone.now()

    processes.wait_until(
        lease_over, timeout=10, what="the lease of the dead worker's chunk to run out"
    )
    resumer = make_user("resumer", "Operators")
    bulk_replay_job_resume(job_id=job.pk, resumed_by=Actor.of(resumer))
    worker = workers.start(env=WORKER_ENV, name="w2")
    try:
        processes.wait_until(
            lambda: finished(job), timeout=120, what="the resumed job to finish"
        )
    finally:
        worker.stop()

    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.SUCCEEDED, worker.log()[-3000:]
    assert job.processed == 200
    ids = replayed_ids(job)
    assert len(ids) == len(set(ids)) == 200  # every row exactly once
    assert set(ids) == {e.pk for e in dead}
    names = set(
        OperatorAction.objects.filter(bulk_job=job).values_list("actor_name", flat=True)
    )
    assert names == {"operator", "resumer"}
    assert interrupted_at < 200
