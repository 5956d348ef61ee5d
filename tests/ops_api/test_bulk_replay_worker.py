"""A bulk replay through the operator API on a REAL Celery worker: planned, executed at a
rate, paused (no chunk after the answer), resumed at another rate, cancelled; every row it
replayed replayed exactly once, the rate kept, each control an operator action of the API
client."""

from __future__ import annotations

import time

import pytest

from tests import processes
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import idempotent_post as post
from tests.webhooks.bulk_replay import replayed_ids
from tests.webhooks.factories import DeadLetteredEventFactory, WebhookSourceFactory
from trail.models import OperatorAction
from webhooks.models import BulkReplayJob

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

WORKER_ENV = {
    "BULK_REPLAY_CHUNK_SIZE": "5",
    "BULK_REPLAY_RATE_TICK_SECONDS": "0.5",
    "INBOX_MAX_ATTEMPTS": "1",
}


def processed(job_id: int) -> int:
    return BulkReplayJob.objects.get(pk=job_id).processed


def test_a_bulk_replay_planned_paced_paused_resumed_and_cancelled_on_a_real_worker(
    workers,
):
    _, token = api_client_make(name="runbook-bot", role="operator")
    ops = bearer_http(token)
    source = WebhookSourceFactory(slug="outage")
    dead = DeadLetteredEventFactory.create_batch(80, source=source)

    plan = post(
        ops, "/api/ops/bulk-replays/", {"mode": "plan", "source": "outage"}, key="plan"
    )
    assert plan.status_code == 200
    assert plan.json()["replayable"] == 80

    worker = workers.start(concurrency=2, env=WORKER_ENV)
    try:
        started = post(
            ops,
            "/api/ops/bulk-replays/",
            {
                "mode": "execute",
                "source": "outage",
                "rate": 10,
                "reason": "outage over",
            },
            key="execute",
        )
        assert started.status_code == 202, started.content
        job_id = started.json()["bulk_replay_id"]
        processes.wait_until(
            lambda: processed(job_id) >= 15, timeout=60, what="the paced job to start"
        )

        paused = post(
            ops,
            f"/api/ops/bulk-replays/{job_id}/pause/",
            {"reason": "peak"},
            key="pause",
        )
        assert paused.status_code == 200, paused.content
        assert paused.json()["state"] == "paused"
        at_pause = paused.json()["done"]
        time.sleep(2.5)  # five ticks of the pace: a running job would replay ~25 more
        assert processed(job_id) == at_pause
        assert BulkReplayJob.objects.get(pk=job_id).state == "paused"

        resumed = post(
            ops, f"/api/ops/bulk-replays/{job_id}/resume/", {"rate": 20}, key="resume"
        )
        assert resumed.status_code == 200, resumed.content
        processes.wait_until(
            lambda: processed(job_id) >= at_pause + 15,
            timeout=60,
            what="the resumed job to go on",
        )
        cancelled = post(
            ops,
            f"/api/ops/bulk-replays/{job_id}/cancel/",
            {"reason": "enough"},
            key="cancel",
        )
        assert cancelled.status_code == 200, cancelled.content
        at_cancel = cancelled.json()["done"]
        time.sleep(1.5)
    finally:
        worker.stop()

    job = BulkReplayJob.objects.get(pk=job_id)
    assert job.state == "cancelled", worker.log()[-3000:]
    assert job.processed == at_cancel < 80
    replayed = replayed_ids(job)
    assert len(replayed) == len(set(replayed)) == at_cancel
    assert set(replayed) <= {e.pk for e in dead}
    # Paced: no second of the run replayed more than the rate allows (plus one chunk).
    controls = list(
        OperatorAction.objects.filter(bulk_job=job)
        .exclude(action="bulk_replay")
        .order_by("pk")
        .values_list("action", "actor_name")
    )
    assert controls == [
        ("start_bulk_replay", "api:runbook-bot"),
        ("pause_bulk_replay", "api:runbook-bot"),
        ("resume_bulk_replay", "api:runbook-bot"),
        ("cancel_bulk_replay", "api:runbook-bot"),
    ]
    chunks = list(
        OperatorAction.objects.filter(bulk_job=job, action="bulk_replay").order_by("pk")
    )
    assert {c.actor_name for c in chunks} == {"api:runbook-bot"}
    for chunk in chunks:
        in_a_second = sum(
            other.event_count
            for other in chunks
            if 0 <= (other.created_at - chunk.created_at).total_seconds() < 1
        )
        assert in_a_second <= 20 + 5
    progress = bearer_http(token).get(f"/api/ops/bulk-replays/{job_id}/").json()
    assert (progress["state"], progress["done"]) == ("cancelled", at_cancel)
