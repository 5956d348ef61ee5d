"""The ``http`` executor against a real receiver (tests/deployments/receiver.py) over real
HTTP, the worker's job runs called in this process, PostgreSQL deciding: one Standard
Webhooks message per job under its one id, every attempt a ``TriggerAttempt`` row, transient
and ambiguous outcomes retried through the outbox (the relay's claim of due retries, as a
worker's relay runs it), permanent ones failing the job at once. Real workers and crashes:
tests/deployments/test_trigger_workers.py."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.utils import timezone

from core.models import AppendOnlyError
from deployments.executors import executor_settings_check
from deployments.models import (
    Build,
    Deployment,
    JobTransition,
    TriggerAttempt,
)
from deployments.outbox import JOBS_OUTBOX
from deployments.services.attempts import job_run
from idempotency.models import IdempotencyRecord
from tests.deployments.factories import (
    build_body,
    deployment_body,
    idempotent_post,
    lease_ended,
    retry_come_due,
)
from tests.deployments.receiver import Fault, Receiver, closed_port_url

pytestmark = pytest.mark.django_db


@pytest.fixture
def receiver(settings):
    with Receiver() as receiving:
        settings.DEPLOY_EXECUTOR = "http"
        settings.DEPLOY_HTTP_URL = receiving.url
        settings.DEPLOY_HTTP_SECRET = receiving.secret
        settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 0.5
        settings.DEPLOY_TRIGGER_RETRY_BASE_SECONDS = 0.01
        settings.DEPLOY_TRIGGER_RETRY_MAX_SECONDS = 2
        settings.DEPLOY_TRIGGER_MAX_ATTEMPTS = 8
        yield receiving


def create(api, key: str = "k1", path: str = "/api/deployments/", body=None):
    body = body or (build_body() if "builds" in path else deployment_body())
    response = idempotent_post(api, path, body, key)
    assert response.status_code == 202, response.content
    model = Build if "builds" in path else Deployment
    field = "build_id" if "builds" in path else "deployment_id"
    return model.objects.get(public_id=response.json()[field])


def run(job, worker: str = "w1") -> str:
    kind = "build" if isinstance(job, Build) else "deployment"
    return job_run(kind=kind, public_id=job.public_id, worker=worker)


def claimed_ids() -> list[str]:
    """What one claim of the relay would publish now (and stamps, as the relay does)."""
    with transaction.atomic():
        _, publications = JOBS_OUTBOX.claim(500)
    return [publication.args[1] for publication in publications]


def swept_ids() -> list[str]:
    with transaction.atomic():
        _, publications = JOBS_OUTBOX.sweep(500)
    return [publication.args[1] for publication in publications]


def run_when_due(job, *, timeout: float = 10) -> str:
    """Waits until the relay's claim publishes the job's retry, then runs it, as a worker
    does with the message."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.public_id in claimed_ids():
            return run(job)
        time.sleep(0.02)
    raise AssertionError(f"{job.public_id} never came due")


def attempts(job) -> list[TriggerAttempt]:
    return list(TriggerAttempt.objects.filter(job=job).order_by("number"))


def retry_waits_a_second(job) -> None:
    """The job's retry is due when its receiver's ``Retry-After: 1`` said, and not before."""
    job.refresh_from_db()
    last = attempts(job)[-1]
    assert job.next_attempt_at == last.retry_at
    assert last.retry_at - last.finished_at == timedelta(seconds=1)


def test_a_2xx_moves_the_job_to_running_after_one_signed_request(api, receiver):
    job = create(api)
    before = api.get(f"/api/deployments/{job.public_id}/").json()

    assert run(job) == "triggered"

    [seen] = receiver.requests_for(job.public_id)
    assert receiver.ids() == {job.public_id}
    assert seen.verified, seen.error  # by the standardwebhooks reference library
    assert seen.acted
    assert seen.headers["webhook-id"] == job.public_id
    assert seen.headers["idempotency-key"] == job.public_id
    assert seen.headers["content-type"] == "application/json"
    assert abs(int(seen.headers["webhook-timestamp"]) - time.time()) < 10
    message = seen.message
    assert set(message) == {"type", "timestamp", "data"}
    assert message["type"] == "deployment.requested"
    assert message["timestamp"] == before["created_at"]
    # The job as GET /api/deployments/<id>/ answered it when it was triggered.
    assert message["data"] == before

    job.refresh_from_db()
    assert job.status == "running"
    assert job.trigger_phase == "triggered"
    assert job.executor == "http"
    assert job.detail == "triggered: HTTP 202"
    assert job.lease_expires_at > timezone.now()
    [attempt] = attempts(job)
    assert (attempt.number, attempt.outcome, attempt.status_code) == (
        1,
        "delivered",
        202,
    )
    assert attempt.finished_at >= attempt.started_at
    assert attempt.duration_seconds > 0
    assert attempt.url == receiver.url
    assert attempt.retry_at is None
    assert attempt.worker == "w1"
    transition = JobTransition.objects.get(job=job)
    assert (transition.from_status, transition.to_status, transition.actor) == (
        "queued",
        "running",
        "w1",
    )
    record = IdempotencyRecord.objects.get(resource_id=job.public_id)
    assert (record.status, record.progress_deadline) == (
        "processing",
        job.lease_expires_at,
    )
    # A redelivered message triggers nothing more.
    assert run(job, "w2") == "not_queued"
    assert len(receiver.requests_for(job.public_id)) == 1


@pytest.mark.slow
def test_retries_go_out_under_the_same_id_until_the_receiver_takes_it(api, receiver):
    job = create(api)
    receiver.plan(
        job.public_id,
        Fault.status(500),
        Fault.status(503),
        Fault.status(429, retry_after=1),
        Fault.drop(),  # acted on, then no answer
        Fault.slow(1.5),  # answered after the timeout
    )
    outcomes = []
    result = run(job)
    while result == "retry_scheduled":
        job.refresh_from_db()
        assert job.status == "queued"
        assert job.trigger_phase == "retry_wait"
        assert job.last_dispatched_at is None  # waiting in the database, not the broker
        assert job.next_attempt_at is not None
        outcomes.append(result)
        result = run_when_due(job)
    assert result == "triggered"
    assert len(outcomes) == 5

    seen = receiver.requests_for(job.public_id)
    assert receiver.ids() == {job.public_id}
    assert len(seen) == 6
    assert all(request.verified for request in seen)
    assert receiver.acted_count(job.public_id) == 1  # one deployment downstream
    assert [request.acted for request in seen] == [
        False,
        False,
        False,
        True,
        False,
        False,
    ]
    # Every attempt sends the same bytes under the same id; only the signature's
    # timestamp may differ.
    assert len({request.body for request in seen}) == 1
    assert {request.headers["webhook-id"] for request in seen} == {job.public_id}
    assert {request.headers["idempotency-key"] for request in seen} == {job.public_id}

    made = attempts(job)
    assert [a.number for a in made] == [1, 2, 3, 4, 5, 6]
    assert [(a.outcome, a.status_code, a.error_class) for a in made] == [
        ("ambiguous", 500, ""),
        ("transient", 503, ""),
        ("transient", 429, ""),
        ("ambiguous", None, "RemoteProtocolError"),
        ("ambiguous", None, "ReadTimeout"),
        ("delivered", 200, ""),
    ]
    assert all(a.retry_at is not None for a in made[:5])
    # The 429's Retry-After was honoured: its retry waited a second.
    assert (made[2].retry_at - made[2].finished_at) >= timedelta(seconds=1)
    assert made[3].started_at >= made[2].retry_at
    job.refresh_from_db()
    assert job.status == "running"
    assert job.trigger_attempt_count == 6


def test_a_permanent_refusal_fails_the_job_at_once(api, receiver):
    job = create(api)
    receiver.plan(job.public_id, Fault.status(422))
    assert run(job) == "failed"
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.detail == "trigger_rejected: HTTP 422"
    assert job.trigger_phase == "gave_up"
    assert [(a.outcome, a.status_code) for a in attempts(job)] == [("rejected", 422)]
    assert receiver.acted_count(job.public_id) == 0
    assert IdempotencyRecord.objects.get(resource_id=job.public_id).status == "failed"
    assert claimed_ids() == [] and run(job) == "not_queued"


def test_the_last_attempt_fails_the_job_as_unreachable(api, receiver, settings):
    settings.DEPLOY_TRIGGER_MAX_ATTEMPTS = 3
    job = create(api)
    receiver.plan(job.public_id, *[Fault.status(503)] * 3)
    assert run(job) == "retry_scheduled"
    assert run_when_due(job) == "retry_scheduled"
    assert run_when_due(job) == "failed"
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.detail == "trigger_unreachable: 3 attempts, the last: HTTP 503"
    last = attempts(job)[-1]
    assert (last.number, last.outcome, last.retry_at) == (3, "transient", None)


def test_a_refused_connection_is_transient(api, receiver, settings):
    settings.DEPLOY_HTTP_URL = closed_port_url()
    job = create(api)
    assert run(job) == "retry_scheduled"
    [attempt] = attempts(job)
    assert (attempt.outcome, attempt.error_class) == ("transient", "ConnectError")
    job.refresh_from_db()
    assert job.detail == ""  # the job's detail changes with its status only


def test_a_denied_destination_is_rejected_without_a_request(api, receiver, settings):
    settings.DEPLOY_HTTP_URL = "http://169.254.169.254/latest/meta-data/"
    job = create(api)
    assert run(job) == "failed"
    job.refresh_from_db()
    # The client reads the class of failure; the address stays on the attempt, for
    # operators (docs/security.md, "Error text").
    assert job.detail == "trigger_rejected: DeniedDestination"
    assert "169.254" in attempts(job)[0].error
    assert receiver.received == []


def test_an_unreachable_receiver_s_socket_error_stays_with_the_operators(
    api, receiver, settings
):
    settings.DEPLOY_HTTP_URL = closed_port_url()
    settings.DEPLOY_TRIGGER_MAX_ATTEMPTS = 2
    job = create(api)
    assert run(job) == "retry_scheduled"
    assert run_when_due(job) == "failed"
    job.refresh_from_db()
    assert job.detail == "trigger_unreachable: 2 attempts, the last: ConnectError"
    answered = api.get(f"/api/deployments/{job.public_id}/").json()
    assert answered["detail"] == job.detail
    assert [(a.error_class, "refused" in a.error) for a in attempts(job)] == [
        ("ConnectError", True),
        ("ConnectError", True),
    ]


def test_an_early_message_for_a_waiting_retry_does_nothing(api, receiver):
    job = create(api)
    receiver.plan(job.public_id, Fault.status(503, retry_after=30))
    assert run(job) == "retry_scheduled"
    assert run(job, "w2") == "not_due"
    assert len(receiver.requests_for(job.public_id)) == 1
    assert claimed_ids() == []  # not due for 30 s


def test_a_retry_waits_out_of_the_broker_until_the_relay_publishes_it(api, receiver):
    job = create(api)
    receiver.plan(job.public_id, Fault.status(503, retry_after=1))
    assert claimed_ids() == [job.public_id]  # the new job's first message
    assert run(job) == "retry_scheduled"
    assert claimed_ids() == []
    assert swept_ids() == []  # nothing lost: nothing for the sweep either
    retry_waits_a_second(job)
    retry_come_due(job)
    assert claimed_ids() == [job.public_id]  # due: published once
    assert claimed_ids() == []
    job.refresh_from_db()
    assert job.last_dispatched_at is not None


def test_the_sweep_publishes_again_what_a_lost_message_or_worker_left(
    api, receiver, settings
):
    settings.DEPLOY_REDISPATCH_AFTER_SECONDS = 60
    long_ago = timezone.now() - timedelta(minutes=5)
    waiting = create(api, "k-retry")
    receiver.plan(waiting.public_id, Fault.status(503, retry_after=0))
    assert run(waiting) == "retry_scheduled"
    # Its retry's message was published long ago and lost.
    Deployment.objects.filter(pk=waiting.pk).update(last_dispatched_at=long_ago)
    lost = create(api, "k-lost")
    in_flight = create(api, "k-live")
    for job in (lost, in_flight):
        receiver.plan(job.public_id, Fault.status(503, retry_after=0))
        assert run(job) == "retry_scheduled"
    # An attempt whose worker died (its lease is over), and one still within its lease.
    Deployment.objects.filter(pk=lost.pk).update(
        trigger_phase="trigger_sent",
        next_attempt_at=None,
        last_dispatched_at=long_ago,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    Deployment.objects.filter(pk=in_flight.pk).update(
        trigger_phase="trigger_sent",
        next_attempt_at=None,
        last_dispatched_at=long_ago,
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    assert sorted(swept_ids()) == sorted([waiting.public_id, lost.public_id])
    assert swept_ids() == []  # stamped: not again within the interval


@pytest.mark.django_db(transaction=True)
def test_a_delivery_while_an_attempt_is_out_does_nothing(api, receiver):
    job = create(api)
    receiver.plan(job.public_id, Fault.hold())
    results = []
    worker = threading.Thread(target=lambda: results.append(_run_closing(job)))
    worker.start()
    try:
        assert receiver.holding.wait(10)
        assert run(job, "w2") == "already_started"
    finally:
        receiver.release()
        worker.join(10)
    assert results == ["triggered"]
    assert len(receiver.requests_for(job.public_id)) == 1


@pytest.mark.django_db(transaction=True)
def test_an_attempt_whose_worker_is_lost_is_closed_and_the_job_triggered_again(
    api, receiver, settings
):
    """The worker that sent attempt 1 stops answering (the receiver holds its request)
    past the lease: the next delivery closes attempt 1 as lost and sends attempt 2 under the
    same id, which the receiver deduplicates. The first worker's late outcome changes
    nothing: its attempt is closed."""
    settings.DEPLOY_RUNNING_LEASE_SECONDS = 1
    settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 10
    job = create(api)
    receiver.plan(job.public_id, Fault.hold())
    results = []
    first = threading.Thread(target=lambda: results.append(_run_closing(job, "w1")))
    first.start()
    try:
        assert receiver.holding.wait(10)
        # Its lease of one second, run out: moved into the past rather than waited for.
        job.refresh_from_db()
        [sent] = attempts(job)
        assert job.lease_expires_at == sent.started_at + timedelta(seconds=1)
        lease_ended(job)
        assert run(job, "w2") == "triggered"
    finally:
        receiver.release()
        first.join(15)
    assert results == ["superseded"]
    made = attempts(job)
    assert [(a.number, a.outcome, a.worker) for a in made] == [
        (1, "lost", "w1"),
        (2, "delivered", "w2"),
    ]
    assert made[0].status_code is None  # the late answer was not written over it
    assert receiver.acted_count(job.public_id) == 1
    assert len(receiver.requests_for(job.public_id)) == 2
    job.refresh_from_db()
    assert job.status == "running"


def _run_closing(job, worker: str = "w1") -> str:
    try:
        return run(job, worker)
    finally:
        connections.close_all()


def test_builds_are_triggered_as_build_requested(api, receiver):
    build = create(api, "b1", "/api/builds/")
    before = api.get(f"/api/builds/{build.public_id}/").json()
    assert run(build) == "triggered"
    [seen] = receiver.requests_for(build.public_id)
    assert seen.verified
    assert seen.message["type"] == "build.requested"
    assert seen.message["data"] == before
    build.refresh_from_db()
    assert build.status == "running"
    assert TriggerAttempt.objects.get(job=build).outcome == "delivered"


def test_closed_attempts_never_change(api, receiver):
    job = create(api)
    run(job)
    [attempt] = attempts(job)
    attempt.error = "rewritten"
    with pytest.raises(AppendOnlyError):
        attempt.save()
    with pytest.raises(AppendOnlyError):
        attempt.delete()
    with pytest.raises(AppendOnlyError):
        TriggerAttempt.objects.filter(pk=attempt.pk).update(error="rewritten")
    with pytest.raises(AppendOnlyError):
        TriggerAttempt.objects.filter(pk=attempt.pk).delete()
    assert TriggerAttempt.objects.filter(pk=attempt.pk).close(error="late") == 0
    assert TriggerAttempt.objects.get(pk=attempt.pk).error == ""


def test_an_external_job_waits_queued_for_its_first_report(api, settings):
    settings.DEPLOY_EXECUTOR = "external"
    job = create(api)
    assert claimed_ids() == [job.public_id]
    assert run(job) == "external"
    job.refresh_from_db()
    assert (job.status, job.executor) == ("queued", "external")
    assert job.executor_started_at is not None
    assert not JobTransition.objects.filter(job=job).exists()
    assert TriggerAttempt.objects.count() == 0
    # Never published again, by the claim or the sweep, however long it waits.
    Deployment.objects.filter(pk=job.pk).update(
        last_dispatched_at=timezone.now() - timedelta(hours=1)
    )
    assert claimed_ids() == [] and swept_ids() == []
    assert run(job, "w2") == "external"
    record = IdempotencyRecord.objects.get(resource_id=job.public_id)
    assert record.progress_deadline > timezone.now()

    report = {
        "deployment_id": job.public_id,
        "status": "running",
        "reported_at": (timezone.now() + timedelta(seconds=1)).isoformat(),
    }
    assert idempotent_post(api, "/api/status-sync/", report, "r1").json()["applied"]
    job.refresh_from_db()
    assert job.status == "running"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"DEPLOY_EXECUTOR": "nonesuch"}, "no executor 'nonesuch'"),
        ({"DEPLOY_EXECUTOR": "http", "DEPLOY_HTTP_URL": ""}, "DEPLOY_HTTP_URL"),
        (
            {
                "DEPLOY_EXECUTOR": "http",
                "DEPLOY_HTTP_URL": "https://ci.example/hook",
                "DEPLOY_HTTP_SECRET": "not-whsec",
            },
            "whsec_",
        ),
        ({"DEPLOY_EXECUTOR": "github", "GITHUB_TOKEN": ""}, "GITHUB_TOKEN"),
    ],
)
def test_a_process_refuses_an_executor_it_cannot_run(settings, overrides, message):
    for name, value in overrides.items():
        setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=message):
        executor_settings_check()


def test_the_default_executors_need_no_settings(settings):
    for name in ("simulated", "external"):
        settings.DEPLOY_EXECUTOR = name
        executor_settings_check()


def test_the_jobs_admin_page_shows_its_attempts(api, receiver, admin_client):
    job = create(api)
    receiver.plan(job.public_id, Fault.status(503))
    assert run(job) == "retry_scheduled"
    assert run_when_due(job) == "triggered"
    page = admin_client.get(f"/admin/deployments/deployment/{job.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "trigger attempts" in text.lower()
    assert "transient" in text and "delivered" in text
    assert receiver.secret not in text


def test_the_relays_probe_sees_new_jobs_and_due_retries_only(api, receiver):
    """``has_waiting``, the idle relay's one statement, agrees with the claim."""
    assert JOBS_OUTBOX.has_waiting() is False
    job = create(api)
    assert JOBS_OUTBOX.has_waiting() is True
    receiver.plan(job.public_id, Fault.status(503, retry_after=1))
    assert claimed_ids() == [job.public_id]
    assert JOBS_OUTBOX.has_waiting() is False  # published: nothing waits
    assert run(job) == "retry_scheduled"
    assert JOBS_OUTBOX.has_waiting() is False  # its retry is not due yet
    retry_waits_a_second(job)
    retry_come_due(job)
    assert JOBS_OUTBOX.has_waiting() is True
    assert claimed_ids() == [job.public_id]
    assert JOBS_OUTBOX.has_waiting() is False


def test_an_attempts_call_never_shows_its_secret():
    from deployments.executors import TriggerCall

    call = TriggerCall(
        job=None,
        attempt=1,
        url="https://ci.example/",
        secret="whsec_x",
    )
    assert "whsec_x" not in repr(call)
