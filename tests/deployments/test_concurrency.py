"""Concurrent first requests with one key, against a real gunicorn server, PostgreSQL and the
Redis broker. No request publishes anything: a relay round (run here, as a worker's relay runs
it) publishes the one job; no worker runs, so its message stays countable in the queue."""

import functools
import json

import pytest
import requests

from core.actors import Actor
from core.logging import CELERY_HEADER
from core.relay.loop import Relay
from deployments.models import Deployment
from idempotency.models import IdempotencyRecord
from tests import processes
from tests.broker import queued_envelopes
from tests.deployments.factories import deployment_body
from tests.threads import run_together
from trail.api_clients import api_client_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TOKEN = "test-token-race-0123456789abcdef"


@pytest.fixture
def server(tmp_path):
    api_client_create(name="race", token=TOKEN, actor=Actor.system())
    processes.purge_broker()
    port = processes.free_port()
    # Threaded workers: up to 2 x 16 requests inside the view at the same moment.
    proc = processes.gunicorn(tmp_path, port=port, workers=2, threads=16)
    proc.start()
    try:
        processes.wait_http_ok(f"http://127.0.0.1:{port}/healthz", timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stop()
        processes.purge_broker()


def fire(url: str, bodies: list[dict], key: str) -> list[requests.Response]:
    """Every body posted at the same moment with the same key, one connection each."""
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "Idempotency-Key": key,
    }

    def one(body: dict) -> requests.Response:
        with requests.Session() as session:
            return session.post(url, data=json.dumps(body), headers=headers, timeout=60)

    responses, errors = run_together([functools.partial(one, body) for body in bodies])
    assert not errors, errors
    return responses


def assert_one_job_message_after_a_relay_round(
    deployment: Deployment, key: str
) -> None:
    """Nothing queued by the requests; one relay round queues exactly one run message for
    the job, with the key as correlation id; a second round queues nothing."""
    assert queued_envelopes() == []
    assert Relay().run_once(sweep=False) == (1, False)
    Relay().run_once(sweep=False)
    messages = queued_envelopes()
    assert len(messages) == 1
    assert messages[0]["headers"]["task"] == "deployments.run_job"
    assert deployment.public_id in messages[0]["headers"]["argsrepr"]
    assert messages[0]["headers"][CELERY_HEADER] == key


def test_fifty_concurrent_requests_with_one_key_make_one_deployment(server):
    responses = fire(f"{server}/api/deployments/", [deployment_body()] * 50, "race-1")

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 49 + [202]
    first = next(r for r in responses if r.status_code == 202)
    replays = [r for r in responses if r.status_code == 200]
    assert all(r.content == first.content for r in replays)
    assert all(r.headers["Location"] == first.headers["Location"] for r in replays)
    assert all(r.headers["Idempotent-Replayed"] == "true" for r in replays)
    assert "Idempotent-Replayed" not in first.headers

    deployment = Deployment.objects.get()
    assert first.json()["deployment_id"] == deployment.public_id
    assert IdempotencyRecord.objects.count() == 1
    assert_one_job_message_after_a_relay_round(deployment, "race-1")


def test_concurrent_requests_with_one_key_and_two_bodies_never_5xx(server):
    bodies = [deployment_body()] * 20 + [deployment_body(environment="prod")] * 20
    responses = fire(f"{server}/api/deployments/", bodies, "race-2")

    assert Deployment.objects.count() == 1
    winner = Deployment.objects.get()
    codes = [r.status_code for r in responses]
    assert codes.count(202) == 1
    for body, response in zip(bodies, responses, strict=True):
        same = body["environment"] == winner.environment
        if response.status_code == 202:
            assert same
        elif same:
            assert response.status_code == 200
        else:
            assert response.status_code == 409
            assert response.json() == {
                "error": "idempotency_key_reused",
                "differing_fields": ["environment"],
            }
    assert_one_job_message_after_a_relay_round(winner, "race-2")
