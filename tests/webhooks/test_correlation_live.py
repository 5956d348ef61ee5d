"""The correlation id end to end, on real processes: a gunicorn server and a Celery worker, both
writing their JSON logs to files. The event id names the request in the web log and the task in
the worker log, whether the worker's relay published the message for a new row or from its
sweep; in a message of several rows, each row's lines name its own event id. No log line holds
the body, the signature or the secret."""

import json
import uuid
from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from core.logging import correlation_id_get
from tests import processes
from tests.broker import broker_reset
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    HMAC_SECRET,
    InboxEventFactory,
    WebhookSourceFactory,
    encode,
    signed_headers,
)
from webhooks.models import InboxEvent, ProcessingStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PROCESS_TASK = "webhooks.process_inbox_events"


def json_lines(process: processes.Process) -> list[dict]:
    records = []
    for line in process.log().splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def task_succeeded_lines(records: list[dict]) -> list[dict]:
    """Celery's own "Task ... succeeded" lines for the processing task: the task body does not
    name a correlation id there, so the one they carry came with the message."""
    return [
        r
        for r in records
        if r.get("logger") == "celery.app.trace"
        and f"{PROCESS_TASK}[" in r.get("message", "")
        and "succeeded" in r.get("message", "")
    ]


def wait_processed(event_id: str, worker: processes.Process) -> InboxEvent:
    def processed():
        return InboxEvent.objects.filter(
            event_id=event_id, processing_status=ProcessingStatus.PROCESSED
        ).first()

    try:
        return processes.wait_until(processed, timeout=60, what="processed")
    except AssertionError:
        raise AssertionError(worker.log()[-3000:]) from None


@pytest.fixture
def worker(tmp_path):
    broker_reset()
    worker = processes.celery_worker(tmp_path, env={"LOG_LEVEL": "INFO"}).start()
    yield worker
    worker.stop()
    broker_reset()


def test_web_and_worker_logs_carry_the_event_id_as_correlation_id(tmp_path, worker):
    WebhookSourceFactory(slug="corr")
    event_id = f"evt_corr_{uuid.uuid4().hex}"
    body = research_event(event_id=event_id)
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=event_id)
    port = processes.free_port()
    server = processes.gunicorn(
        tmp_path, port=port, workers=1, env={"LOG_LEVEL": "INFO"}
    ).start()
    try:
        processes.wait_http_ok(f"http://127.0.0.1:{port}/healthz", timeout=30)
        response = requests.post(
            f"http://127.0.0.1:{port}/webhooks/corr/",
            data=raw,
            headers={**headers, "Content-Type": "application/json"},
            timeout=30,
        )
        assert response.status_code == 202, response.text
        wait_processed(event_id, worker)
        processes.wait_until(
            lambda: task_succeeded_lines(json_lines(worker)),
            timeout=10,
            what="the task's log line",
        )
    finally:
        server.stop()
        worker.stop()

    web = json_lines(server)
    accepted = [
        r
        for r in web
        if r.get("message") == "inbox.accepted" and r.get("event_id") == event_id
    ]
    assert len(accepted) == 1, server.log()[-3000:]
    assert accepted[0]["correlation_id"] == event_id
    assert accepted[0]["level"] == "INFO"

    work = json_lines(worker)
    # A batch of one row: its one line carries the row's event id as correlation id.
    processed = [
        r
        for r in work
        if r.get("message") == "inbox.batch_processed"
        and r.get("correlation_id") == event_id
    ]
    assert len(processed) == 1, worker.log()[-3000:]
    assert processed[0]["counts"] == {ProcessingStatus.PROCESSED: 1}
    assert processed[0]["event_ids"] == [event_id]
    succeeded = task_succeeded_lines(work)
    assert [r.get("correlation_id") for r in succeeded] == [event_id]

    signature = headers["X-Webhook-Signature"].removeprefix("v1=")
    for name, log in (("web", server.log()), ("worker", worker.log())):
        assert raw.decode() not in log, name
        assert body["data"]["summary"] not in log, name
        assert signature not in log, name
        assert HMAC_SECRET not in log, name


def test_a_message_published_by_the_sweep_carries_the_event_id(worker):
    """A row whose message was lost (published long ago, never taken): the sweep of the
    worker's relay publishes it again, with the event id as correlation id."""
    long_ago = timezone.now() - timedelta(minutes=5)
    event = InboxEventFactory(
        received_at=long_ago - timedelta(minutes=5), dispatched_at=long_ago
    )
    assert correlation_id_get() == ""

    wait_processed(event.event_id, worker)
    processes.wait_until(
        lambda: task_succeeded_lines(json_lines(worker)),
        timeout=10,
        what="the task's log line",
    )
    worker.stop()
    work = json_lines(worker)
    assert [r for r in work if r.get("logger") == "core.relay"], worker.log()[-3000:]
    assert all(
        not r.get("correlation_id") for r in work if r.get("logger") == "core.relay"
    )
    succeeded = task_succeeded_lines(work)
    assert [r.get("correlation_id") for r in succeeded] == [event.event_id]
    event.refresh_from_db()
    assert event.dispatched_at > long_ago


def test_a_batch_is_one_line_naming_each_row(tmp_path):
    """Rows committed before the worker starts: its relay takes them in one claim, one
    message of three ids with no correlation id; its one line names each row."""
    broker_reset()
    events = [InboxEventFactory() for _ in range(3)]
    worker = processes.celery_worker(tmp_path, env={"LOG_LEVEL": "INFO"}).start()
    try:
        for event in events:
            wait_processed(event.event_id, worker)
        processes.wait_until(
            lambda: task_succeeded_lines(json_lines(worker)),
            timeout=10,
            what="the task's log line",
        )
    finally:
        worker.stop()
        broker_reset()
    work = json_lines(worker)
    succeeded = task_succeeded_lines(work)
    assert len(succeeded) == 1, worker.log()[-3000:]
    assert not succeeded[0].get("correlation_id")
    # At INFO, one line for the batch, naming every row (each row's own line is DEBUG).
    assert not [r for r in work if r.get("message") == "inbox.processed"]
    (batch,) = [r for r in work if r.get("message") == "inbox.batch_processed"]
    assert not batch.get("correlation_id")
    assert batch["counts"] == {"processed": 3}
    assert batch["inbox_event_ids"] == [e.pk for e in events]
    assert batch["event_ids"] == [e.event_id for e in events]
