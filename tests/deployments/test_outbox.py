"""Jobs as an outbox (``deployments.outbox``), served by the relay (``core.relay``) against
PostgreSQL and the real Redis broker: a new deployment or build is committed with no message;
the relay's claim publishes each waiting job once, with its idempotency key as correlation id;
its sweep publishes again a queued job whose message was lost and fails a running job whose
lease ran out."""

import json
from collections import Counter
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from core.logging import CELERY_HEADER
from core.relay.loop import Relay
from core.relay.outbox import outbox_lag_seconds, relay_round
from deployments.models import Build, Deployment, JobTransition
from deployments.outbox import JOBS_OUTBOX
from deployments.services.jobs import jobs_lost_fail
from tests.broker import broker_messages, broker_reset
from tests.deployments.factories import (
    BuildFactory,
    DeploymentFactory,
    build_body,
    deployment_body,
)
from tests.threads import run_together

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean_broker():
    broker_reset()
    yield
    broker_reset()


def job_messages() -> list[tuple[list, str | None]]:
    """The run messages waiting in the queue: their arguments and correlation id."""
    return [
        (m["args"], m["headers"].get(CELERY_HEADER))
        for m in broker_messages()
        if m["task"] == "deployments.run_job"
    ]


def claim(limit: int = 500) -> int:
    return relay_round(JOBS_OUTBOX, JOBS_OUTBOX.claim, limit)


def sweep(limit: int = 500) -> int:
    return relay_round(JOBS_OUTBOX, JOBS_OUTBOX.sweep, limit)


def transitions(job) -> list[tuple[str, str]]:
    return list(
        JobTransition.objects.filter(job=job)
        .order_by("id")
        .values_list("from_status", "to_status")
    )


# --- claim --------------------------------------------------------------------------------


def test_creating_jobs_publishes_nothing_and_the_relay_publishes_each_once(api):
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True) as callbacks:
        deployed = api.post(
            "/api/deployments/",
            data=json.dumps(deployment_body()),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="dep-key-1",
        )
        built = api.post(
            "/api/builds/",
            data=json.dumps(build_body()),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="build-key-1",
        )
    assert (deployed.status_code, built.status_code) == (202, 202)
    assert callbacks == []
    assert broker_messages() == []
    deployment, build = Deployment.objects.get(), Build.objects.get()
    assert deployment.last_dispatched_at is None and build.last_dispatched_at is None
    assert JOBS_OUTBOX.has_waiting()
    assert JOBS_OUTBOX.oldest_waiting() == deployment.created_at

    assert claim() == 2

    assert sorted(job_messages()) == [
        (["build", build.public_id], "build-key-1"),
        (["deployment", deployment.public_id], "dep-key-1"),
    ]
    deployment.refresh_from_db()
    build.refresh_from_db()
    assert deployment.last_dispatched_at is not None
    assert build.last_dispatched_at is not None
    assert not JOBS_OUTBOX.has_waiting()
    assert JOBS_OUTBOX.oldest_waiting() is None
    assert outbox_lag_seconds()["jobs"] == 0.0
    # A second round takes nothing.
    assert claim() == 0
    assert Relay().run_once(sweep=False) == (0, False)
    assert len(job_messages()) == 2


def test_the_claim_leaves_jobs_that_wait_for_nothing():
    now = timezone.now()
    waiting = DeploymentFactory()
    DeploymentFactory(last_dispatched_at=now)  # its message is out
    DeploymentFactory(status="running", executor_started_at=now)
    DeploymentFactory(status="succeeded")
    # Moved back to queued by a report after a worker started it: never run again.
    DeploymentFactory(status="queued", executor_started_at=now, claimed_by="gone")
    BuildFactory(status="failed")

    assert claim() == 1
    assert [args for args, _ in job_messages()] == [["deployment", waiting.public_id]]


def test_due_trigger_retries_are_claimed_soonest_due_first():
    """After new jobs, due retries in the order they came due, whatever their ids: the one
    due longest, created last, goes first; one not yet due waits."""
    now = timezone.now()
    started = {"executor_started_at": now, "claimed_by": "w1"}
    later = [
        DeploymentFactory(next_attempt_at=now - timedelta(seconds=5), **started)
        for _ in range(3)
    ]
    soonest = DeploymentFactory(next_attempt_at=now - timedelta(minutes=5), **started)
    DeploymentFactory(next_attempt_at=now + timedelta(minutes=5), **started)
    new = DeploymentFactory()

    assert claim(2) == 2
    assert [args[1] for args, _ in job_messages()] == [
        new.public_id,
        soonest.public_id,
    ]
    assert claim(10) == 3
    assert {args[1] for args, _ in job_messages()[2:]} == {j.public_id for j in later}


def test_a_round_takes_at_most_its_limit_across_deployments_and_builds():
    deployments = [DeploymentFactory() for _ in range(3)]
    builds = [BuildFactory() for _ in range(3)]

    assert claim(4) == 4
    assert claim(4) == 2
    assert claim(4) == 0
    published = [args[1] for args, _ in job_messages()]
    assert sorted(published) == sorted(j.public_id for j in [*deployments, *builds])


def test_three_relays_racing_publish_each_job_exactly_once():
    jobs = [DeploymentFactory() for _ in range(60)] + [
        BuildFactory() for _ in range(60)
    ]

    def relay_until_empty() -> int:
        relay, taken = Relay(batch_limit=7), 0
        while True:
            count, _ = relay.run_once(sweep=False)
            if not count:
                return taken
            taken += count

    taken, errors = run_together([relay_until_empty] * 3)

    assert not errors, errors
    assert sum(taken) == 120
    published = Counter(args[1] for args, _ in job_messages())
    assert set(published) == {j.public_id for j in jobs}
    assert max(published.values()) == 1


# --- sweep --------------------------------------------------------------------------------


@override_settings(DEPLOY_REDISPATCH_AFTER_SECONDS=60)
def test_the_sweep_redispatches_only_stale_queued_jobs_and_fails_lost_ones():
    now = timezone.now()
    old = now - timedelta(seconds=120)
    stale = DeploymentFactory(last_dispatched_at=old)
    DeploymentFactory(last_dispatched_at=now)  # its message is still on its way
    DeploymentFactory()  # never published: the claim's, not the sweep's
    lost = DeploymentFactory(
        status="running",
        executor_started_at=old,
        last_dispatched_at=old,
        lease_expires_at=now - timedelta(seconds=1),
    )
    DeploymentFactory(
        status="running",
        executor_started_at=old,
        last_dispatched_at=old,
        lease_expires_at=now + timedelta(minutes=5),
    )
    stale_build = BuildFactory(client=stale.client, last_dispatched_at=old)

    assert sweep() == 3
    assert sweep() == 0

    assert sorted(job_messages()) == [
        (["build", stale_build.public_id], "b"),
        (["deployment", stale.public_id], "k"),
    ]
    stale.refresh_from_db()
    assert stale.last_dispatched_at >= now
    lost.refresh_from_db()
    assert lost.status == "failed"
    assert lost.detail.startswith("worker_lost")
    assert transitions(lost) == [("running", "failed")]


def test_jobs_lost_fail_fails_each_expired_lease_once():
    now = timezone.now()
    expired = [
        DeploymentFactory(
            status="running",
            executor_started_at=now - timedelta(minutes=10),
            lease_expires_at=now - timedelta(seconds=1),
        )
        for _ in range(20)
    ]

    failed, errors = run_together([jobs_lost_fail] * 3)

    assert not errors, errors
    assert sum(failed) == 20
    for job in expired:
        assert transitions(job) == [("running", "failed")]
    assert jobs_lost_fail() == 0
