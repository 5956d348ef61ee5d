"""A deploy target's circuit breaker and its limit of jobs in flight
(docs/subsystems/executors.md, "A target's breaker"), against a real receiver over real HTTP
(tests/deployments/receiver.py), the worker's job runs called in this process, PostgreSQL
deciding: a target failing every request opens after N attempts, its jobs then wait (queued,
no attempt spent, never failed for it), one probe goes after the cool-down and closes it when
the receiver is back, every change is an operator action, and no job is triggered twice.
Real workers: tests/deployments/test_trigger_workers.py."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from core.actors import Actor
from deployments.metrics import TargetBreakerCollector
from deployments.models import (
    BreakerState,
    Deployment,
    DeployTarget,
    TriggerAttempt,
)
from deployments.services.attempts import job_run
from deployments.services.breakers import breaker_set
from deployments.targets import deploy_target_save
from tests.deployments.factories import deployment_body, idempotent_post
from tests.deployments.receiver import Fault, Receiver
from tests.threads import run_together
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

COOLDOWN = 0.3


@pytest.fixture
def receiver(settings):
    settings.DEPLOY_EXECUTOR = "simulated"
    settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 1
    settings.DEPLOY_TRIGGER_RETRY_BASE_SECONDS = 0.01
    settings.DEPLOY_TRIGGER_RETRY_MAX_SECONDS = 0.05
    settings.DEPLOY_TRIGGER_MAX_ATTEMPTS = 20
    settings.DEPLOY_TARGET_BREAKER_FAILURES = 3
    settings.DEPLOY_TARGET_BREAKER_WINDOW_SECONDS = 60
    settings.DEPLOY_TARGET_BREAKER_COOLDOWN_SECONDS = COOLDOWN
    settings.DEPLOY_TARGET_WAIT_SECONDS = 0.1
    with Receiver() as receiving:
        yield receiving


def target_make(receiver: Receiver, **fields) -> DeployTarget:
    made = DeployTarget(
        name="argo",
        executor="http",
        url=receiver.url,
        repository_pattern="acme/*",
        **fields,
    )
    deploy_target_save(target=made, secret=receiver.secret, actor=Actor.system())
    return made


def create(api, key: str) -> Deployment:
    body = deployment_body(repository="acme/shop", environment="production")
    response = idempotent_post(api, "/api/deployments/", body, key)
    assert response.status_code == 202
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def run(job) -> str:
    return job_run(kind="deployment", public_id=job.public_id, worker="w1")


def due_now(job) -> None:
    """The job's wait over, as the clock would make it (the relay publishes it then)."""
    Deployment.objects.filter(pk=job.pk).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )


def breaker(name: str = "argo") -> DeployTarget:
    return DeployTarget.objects.get(name=name)


def changes() -> list[tuple[str, str, str, str]]:
    """The breaker's recorded changes: (from, to, cause, actor)."""
    return [
        (a.details["previous"], a.details["state"], a.details["cause"], a.actor_name)
        for a in OperatorAction.objects.filter(
            action="set_deploy_target_breaker"
        ).order_by("id")
    ]


def gauges() -> dict[str, dict[str, float]]:
    families = {f.name: f for f in TargetBreakerCollector().collect()}
    return {
        name: {s.labels["target"]: s.value for s in family.samples}
        for name, family in families.items()
    }


def test_a_failing_target_opens_after_n_attempts_and_its_jobs_wait(api, receiver):
    receiver.fault_for = lambda _id: Fault.status(503)
    target_make(receiver)
    jobs = [create(api, f"k{n}") for n in range(5)]

    assert [run(job) for job in jobs[:3]] == ["retry_scheduled"] * 3
    assert breaker().breaker_state == BreakerState.OPEN
    assert breaker().breaker_failures == 3
    assert changes() == [("closed", "open", "failures", "system")]
    assert gauges()["deploy_target_breaker_open"] == {"argo": 1.0}
    assert gauges()["deploy_target_breaker_failures"] == {"argo": 3.0}

    # New jobs, and the failed ones' retries once due, wait: no request, no attempt.
    seen = len(receiver.received)
    assert [run(job) for job in jobs[3:]] == ["waiting", "waiting"]
    due_now(jobs[0])
    assert run(jobs[0]) == "waiting"
    assert len(receiver.received) == seen
    for job in (jobs[0], *jobs[3:]):
        job.refresh_from_db()
        assert job.status == "queued"
        assert job.detail.startswith(
            "breaker_open: the deploy target failed 3 attempts"
        )
        assert job.next_attempt_at is not None
    assert TriggerAttempt.objects.filter(job__in=jobs[3:]).count() == 0
    assert TriggerAttempt.objects.filter(job=jobs[0]).count() == 1
    # The API says so, and nothing about the target's address.
    answer = api.get(f"/api/deployments/{jobs[4].public_id}/").json()
    assert (answer["status"], answer["detail"]) == ("queued", jobs[4].detail)
    assert receiver.url not in answer["detail"]


def test_the_probe_closes_it_when_the_receiver_recovers_and_none_goes_twice(
    api, receiver
):
    receiver.fault_for = lambda _id: Fault.status(503)
    target_make(receiver)
    jobs = [create(api, f"k{n}") for n in range(5)]
    for job in jobs[:3]:
        assert run(job) == "retry_scheduled"
    for job in jobs[3:]:
        assert run(job) == "waiting"
    assert breaker().breaker_state == BreakerState.OPEN

    # Not before the cool-down.
    due_now(jobs[3])
    assert run(jobs[3]) == "waiting"
    time.sleep(COOLDOWN + 0.05)
    receiver.fault_for = None  # the receiver is back

    for job in jobs:
        due_now(job)
    # The first job due is the probe: its attempt alone goes, and closes the breaker.
    assert run(jobs[3]) == "triggered"
    assert breaker().breaker_state == BreakerState.CLOSED
    assert [run(job) for job in (*jobs[:3], jobs[4])] == ["triggered"] * 4
    assert changes() == [
        ("closed", "open", "failures", "system"),
        ("open", "half_open", "cooldown", "system"),
        ("half_open", "closed", "probe_succeeded", "system"),
    ]
    assert gauges()["deploy_target_breaker_open"] == {"argo": 0.0}
    for job in jobs:
        job.refresh_from_db()
        assert (job.status, job.detail) == ("running", "triggered: HTTP 202")
        assert receiver.acted_count(job.public_id) == 1


def test_a_probe_that_fails_opens_it_again(api, receiver):
    receiver.fault_for = lambda _id: Fault.status(503)
    target_make(receiver)
    jobs = [create(api, f"k{n}") for n in range(4)]
    for job in jobs[:3]:
        run(job)
    time.sleep(COOLDOWN + 0.05)
    assert run(jobs[3]) == "retry_scheduled"  # the probe: sent, and failed
    assert breaker().breaker_state == BreakerState.OPEN
    assert changes()[-2:] == [
        ("open", "half_open", "cooldown", "system"),
        ("half_open", "open", "probe_failed", "system"),
    ]
    due_now(jobs[0])
    assert run(jobs[0]) == "waiting"


@pytest.mark.django_db(transaction=True)
def test_when_the_cool_down_ends_exactly_one_of_the_jobs_due_is_the_probe(
    api, receiver
):
    """Six jobs due at the same moment, each in its own thread on its own connection:
    the target's row lock lets one become the probe; the others see it half-open and wait
    while the probe's attempt is on its way (the receiver answers it slowly)."""
    target_make(receiver)
    jobs = [create(api, f"k{n}") for n in range(6)]
    DeployTarget.objects.filter(name="argo").update(
        breaker_state=BreakerState.OPEN,
        breaker_failures=3,
        breaker_changed_at=timezone.now() - timedelta(seconds=10),
    )
    receiver.delay = 0.5

    outcomes, errors = run_together([lambda job=job: run(job) for job in jobs])

    assert errors == []
    assert sorted(outcomes) == ["triggered"] + ["waiting"] * 5
    assert len(receiver.ids()) == 1
    assert breaker().breaker_state == BreakerState.CLOSED
    assert [change[2] for change in changes()] == ["cooldown", "probe_succeeded"]


def test_answers_clear_the_count_and_refusals_never_open_it(api, receiver):
    target_make(receiver)
    jobs = [create(api, f"k{n}") for n in range(6)]
    receiver.plan(jobs[0].public_id, Fault.status(503))
    receiver.plan(jobs[1].public_id, Fault.status(503))
    assert run(jobs[0]) == run(jobs[1]) == "retry_scheduled"
    assert breaker().breaker_failures == 2
    assert run(jobs[2]) == "triggered"  # an answer: the count starts again
    assert breaker().breaker_failures == 0
    for job in jobs[3:]:
        receiver.plan(job.public_id, Fault.status(422))
        assert run(job) == "failed"  # a refusal is an answer: the target is up
    receiver.plan(jobs[0].public_id, Fault.status(429, retry_after=0))
    due_now(jobs[0])
    assert run(jobs[0]) == "retry_scheduled"
    assert breaker().breaker_state == BreakerState.CLOSED
    assert breaker().breaker_failures == 0
    assert changes() == []


def test_failures_further_apart_than_the_window_do_not_add_up(api, receiver, settings):
    settings.DEPLOY_TARGET_BREAKER_WINDOW_SECONDS = 0.2
    receiver.fault_for = lambda _id: Fault.status(503)
    target_make(receiver)
    jobs = [create(api, f"k{n}") for n in range(3)]
    for job in jobs:
        assert run(job) == "retry_scheduled"
        time.sleep(0.25)
    assert breaker().breaker_failures == 1
    assert breaker().breaker_state == BreakerState.CLOSED


def test_operators_open_and_close_it_and_each_change_is_recorded(
    api, receiver, django_user_model
):
    target = target_make(receiver)
    operator = django_user_model.objects.create_user("ops")
    job = create(api, "k1")

    assert breaker_set(
        target=target, state="open", actor=Actor.of(operator), reason="maintenance"
    )
    assert not breaker_set(
        target=target, state="open", actor=Actor.of(operator), reason="again"
    )
    assert run(job) == "waiting"
    assert receiver.received == []
    assert breaker_set(
        target=target, state="closed", actor=Actor.of(operator), reason=""
    )
    due_now(job)
    assert run(job) == "triggered"
    assert changes() == [
        ("closed", "open", "operator", "ops"),
        ("open", "closed", "operator", "ops"),
    ]
    with pytest.raises(ValueError):
        breaker_set(
            target=target, state="half_open", actor=Actor.of(operator), reason=""
        )


def test_a_change_of_the_target_s_settings_keeps_its_breaker(api, receiver):
    """The admin saves what the form read: a breaker that moved meanwhile stays moved."""
    receiver.fault_for = lambda _id: Fault.status(503)
    stale = target_make(receiver)  # read before the breaker opens
    for n in range(3):
        run(create(api, f"k{n}"))
    assert breaker().breaker_state == BreakerState.OPEN
    stale.priority = 5
    deploy_target_save(target=stale, secret=None, actor=Actor.system())
    assert (breaker().priority, breaker().breaker_state) == (5, BreakerState.OPEN)
    assert breaker().breaker_failures == 3


# --- max_in_flight -------------------------------------------------------------------------


def test_at_most_n_in_flight_and_the_rest_wait_their_turn_in_job_order(api, receiver):
    target_make(receiver, max_in_flight=2)
    jobs = [create(api, f"k{n}") for n in range(5)]

    assert [run(job) for job in jobs] == ["triggered"] * 2 + ["waiting"] * 3
    assert receiver.ids() == {jobs[0].public_id, jobs[1].public_id}
    for job in jobs[2:]:
        job.refresh_from_db()
        assert job.detail == (
            "target_busy: the deploy target has 2 jobs in flight, its limit; the trigger "
            "waits for its turn"
        )

    # One finishes: the oldest waiting takes its slot, not whichever comes first.
    report = {
        "deployment_id": jobs[0].public_id,
        "status": "succeeded",
        "reported_at": (timezone.now() + timedelta(seconds=1)).isoformat(),
    }
    assert idempotent_post(api, "/api/status-sync/", report, "r1").status_code == 201
    for job in jobs[2:]:
        due_now(job)
    assert run(jobs[4]) == "waiting"  # jobs[2] and [3] waited longer
    assert run(jobs[3]) == "waiting"  # jobs[2] waited longer still
    assert run(jobs[2]) == "triggered"
    due_now(jobs[3])
    assert run(jobs[3]) == "waiting"  # two in flight again
    assert receiver.ids() == {j.public_id for j in jobs[:3]}


def test_a_retry_of_a_job_in_flight_keeps_its_slot(api, receiver):
    target_make(receiver, max_in_flight=1)
    first, second = create(api, "k1"), create(api, "k2")
    receiver.plan(first.public_id, Fault.status(503))
    assert run(first) == "retry_scheduled"
    assert run(second) == "waiting"  # the first holds the one slot while it retries
    due_now(first)
    assert run(first) == "triggered"
    assert receiver.acted_count(first.public_id) == 1
