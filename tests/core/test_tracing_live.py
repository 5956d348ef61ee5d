"""Tracing across processes, for real: a gunicorn server and a Celery worker (with its relay)
export their spans over OTLP/HTTP to a receiver started here (``tests.otlp_receiver``), and
the ``http`` trigger's receiver (``tests.deployments.receiver``) is a real server too.

A signed webhook, on Redis and on RabbitMQ: the request's span, the relay's publish span
linked to it, the worker's process span linked to it across the outbox, in the publish
span's trace, and the handler's span under the process span. A deployment: the request's
span with its idempotency attributes, the job's process span linked to it, the trigger's
span, and the trigger's receiver given a ``traceparent`` of the trigger's trace."""

from __future__ import annotations

import hashlib

import pytest
import requests
from django.conf import settings

from deployments.models import Deployment
from tests import processes
from tests.core.factories import api_client_make
from tests.deployments.factories import deployment_body
from tests.deployments.receiver import Receiver
from tests.integrations.research.factories import research_event
from tests.otlp_receiver import CONSUMER, PRODUCER, SERVER, OtlpReceiver
from tests.webhooks.factories import WebhookSourceFactory, encode, signed_headers
from webhooks.models import InboxEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _tracing_env(collector: OtlpReceiver, **more: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_SERVICE_NAME": "retrysafe-test",
        # Exported within a fifth of a second rather than five.
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "LOG_LEVEL": "WARNING",
        **more,
    }


@pytest.fixture
def collector():
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture
def trigger_receiver():
    with Receiver() as receiver:
        yield receiver


@pytest.fixture
def broker(request) -> str:
    """The test broker unless a test asks for each in turn (``broker_url``)."""
    if "broker_url" in request.fixturenames:
        return request.getfixturevalue("broker_url")
    return settings.CELERY_BROKER_URL


@pytest.fixture
def traced(tmp_path, collector, trigger_receiver, workers, running, broker):
    """A traced gunicorn server (its URL) and a traced worker, the ``http`` executor
    pointed at ``trigger_receiver``."""
    env = _tracing_env(
        collector,
        CELERY_BROKER_URL=broker,
        DEPLOY_EXECUTOR="http",
        DEPLOY_HTTP_URL=trigger_receiver.url,
        DEPLOY_HTTP_SECRET=trigger_receiver.secret,
    )
    port = processes.free_port()
    server = running(processes.gunicorn(tmp_path, port=port, workers=1, env=env))
    try:
        processes.wait_http_ok(f"http://127.0.0.1:{port}/healthz", timeout=30)
    except AssertionError:
        raise AssertionError(server.log()) from None
    workers.start(env=env)
    workers.ready()
    return f"http://127.0.0.1:{port}"


def test_a_webhook_is_traced_from_its_request_through_the_relay_to_its_handler(
    broker_url, traced, collector, workers
):
    system = "rabbitmq" if broker_url.startswith("amqp") else "redis"
    WebhookSourceFactory(slug="traced")
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])

    answer = requests.post(f"{traced}/webhooks/traced/", data=raw, headers=headers)
    assert answer.status_code == 202, answer.text
    event = InboxEvent.objects.get(event_id=body["event_id"])
    workers.wait_until(
        lambda: InboxEvent.objects.get(pk=event.pk).processing_status == "processed",
        timeout=60,
        what="the event processed",
    )

    request = collector.wait_for(
        lambda s: (
            s.kind == SERVER
            and s.attributes.get("webhook.event_id") == body["event_id"]
        ),
        what="of the webhook request",
    )
    assert request.service == "retrysafe-test"
    assert request.attributes["webhook.source"] == "traced"
    assert request.attributes["webhook.outcome"] == "accepted"
    # The row keeps the request's context, written by the ingest's one statement.
    event.refresh_from_db()
    assert event.traceparent.split("-")[:3] == ["00", request.trace_id, request.span_id]

    publish = collector.wait_for(
        lambda s: s.kind == PRODUCER and s.linked_to(request),
        what="publishing the row, linked to the request",
    )
    assert publish.name == "publish celery"
    assert publish.parent_span_id == ""  # a relay round is a trace of its own
    assert publish.trace_id != request.trace_id
    assert publish.attributes["messaging.system"] == system
    assert publish.attributes["messaging.operation.type"] == "publish"
    assert publish.attributes["messaging.destination.name"] == "celery"
    assert publish.attributes["outbox.row_count"] == 1
    message_id = publish.attributes["messaging.message.id"]

    process = collector.wait_for(
        lambda s: s.kind == CONSUMER and s.linked_to(request),
        what="processing the row, linked to the request",
    )
    # In the message's trace, across the broker.
    assert process.trace_id == publish.trace_id
    assert process.attributes["messaging.operation.type"] == "process"
    assert process.attributes["messaging.message.id"] == message_id
    assert process.attributes["messaging.system"] == system

    handler = collector.wait_for(
        lambda s: s.name == "handle research" and s.child_of(process),
        what="of the handler, under the batch",
    )
    assert handler.linked_to(request)
    assert handler.attributes["webhook.event_id"] == body["event_id"]
    assert handler.attributes["webhook.outcome"] == "processed"
    # No body, no signature on any span.
    [signature] = [v for k, v in headers.items() if "signature" in k.lower()]
    for span in collector.received():
        for value in span.attributes.values():
            assert raw.decode() not in str(value)
            assert signature not in str(value)


def test_a_deployment_is_traced_to_its_trigger_and_downstream(
    traced, collector, workers, trigger_receiver
):
    _, token = api_client_make(name="traced-ci")
    answer = requests.post(
        f"{traced}/api/deployments/",
        json=deployment_body(),
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "traced-1"},
    )
    assert answer.status_code == 202, answer.text
    job = Deployment.objects.get(public_id=answer.json()["deployment_id"])
    workers.wait_until(
        lambda: trigger_receiver.requests_for(job.public_id),
        timeout=60,
        what="the trigger received",
    )

    request = collector.wait_for(
        lambda s: s.kind == SERVER and "idempotency.outcome" in s.attributes,
        what="of the deployment request",
    )
    assert request.attributes["idempotency.outcome"] == "created"
    assert request.attributes["idempotency.operation"] == "deployment.create"
    assert (
        request.attributes["idempotency.key"]
        == hashlib.sha256(b"traced-1").hexdigest()[:16]
    )
    job.refresh_from_db()
    assert job.traceparent.split("-")[:3] == ["00", request.trace_id, request.span_id]

    publish = collector.wait_for(
        lambda s: s.kind == PRODUCER and s.linked_to(request),
        what="publishing the job, linked to the request",
    )
    process = collector.wait_for(
        lambda s: s.kind == CONSUMER and s.linked_to(request),
        what="the job's run, linked to the request",
    )
    assert process.trace_id == publish.trace_id
    assert process.attributes["deployments.job_id"] == job.public_id
    trigger = collector.wait_for(
        lambda s: s.name == "trigger http" and s.trace_id == process.trace_id,
        what="of the trigger",
    )
    assert trigger.attributes["deployments.job_id"] == job.public_id
    assert trigger.attributes["deployments.outcome"] == "delivered"

    # The trigger's receiver got the trigger's trace in its request.
    sent = trigger_receiver.requests_for(job.public_id)[0]
    traceparent = sent.headers["traceparent"]
    version, trace_id, parent_id, flags = traceparent.split("-")
    assert (version, trace_id) == ("00", trigger.trace_id)
    assert int(flags, 16) & 1  # sampled
    # Its parent: the trigger's span, or the span of the HTTP request under it.
    sender = collector.wait_for(
        lambda s: s.span_id == parent_id, what="named by the traceparent sent"
    )
    assert sender.span_id == trigger.span_id or sender.child_of(trigger)
    assert sent.verified, sent.error
