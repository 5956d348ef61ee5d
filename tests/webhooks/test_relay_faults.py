"""The outbox relay under faults, with REAL processes (docs/architecture.md, "Request paths"):
a relay killed with SIGKILL while it publishes, rows committed while no relay runs, the broker
restarted under load, and many copies of one event at once. In every case each accepted event
is processed, and applied at most once."""

from __future__ import annotations

import functools

import pytest
import requests
from django.db.models import Count

from chaos.services import PrivateRedis
from research.models import DocumentRevision
from tests import processes
from tests.integrations.research.factories import research_event
from tests.threads import run_together
from tests.webhooks.factories import (
    WebhookSourceFactory,
    encode,
    inbox_events_bulk_create,
    signed_headers,
)
from webhooks.models import TERMINAL_STATUSES, InboxEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST_SWEEP = {
    "RELAY_SWEEP_INTERVAL_SECONDS": "1",
    "INBOX_REDISPATCH_AFTER_SECONDS": "2",
    "INBOX_PROCESSING_LEASE_SECONDS": "6",
}


def relay_process(tmp_path, name: str, env: dict) -> processes.Process:
    """``manage.py relay``: a relay apart from the workers."""
    return processes.Process(
        processes.relay_command(),
        processes.child_env(**env),
        tmp_path / f"relay-{name}.log",
    )


def terminal() -> int:
    return InboxEvent.objects.filter(processing_status__in=TERMINAL_STATUSES).count()


def assert_each_applied_once(count: int) -> None:
    assert InboxEvent.objects.count() == count
    assert terminal() == count
    assert set(InboxEvent.objects.values_list("processing_status", flat=True)) <= {
        "processed",
        "ignored_out_of_order",
    }
    per_event = DocumentRevision.objects.values("inbox_event").annotate(n=Count("id"))
    assert not per_event.filter(n__gt=1).exists()
    assert (
        DocumentRevision.objects.count()
        == InboxEvent.objects.filter(processing_status="processed").count()
    )


def bodies(count: int, tag: str) -> list[dict]:
    return [
        research_event(entity_id=f"doc_{tag}_{i % 100}", source_version=1 + i // 100)
        for i in range(count)
    ]


def test_a_relay_killed_while_it_publishes_loses_nothing(tmp_path, running, broker_url):
    """Workers that relay nothing, and one relay apart (``manage.py relay``), killed with
    SIGKILL mid-stream; rows committed while no relay runs wait; a new relay publishes
    them, and the rows the killed one had stamped but not published, from its sweep."""
    env = {**FAST_SWEEP, "CELERY_BROKER_URL": broker_url}
    inbox_events_bulk_create(bodies(600, "a"))
    for name in ("w1", "w2"):
        running(
            processes.celery_worker(
                tmp_path, name=name, env={**env, "RELAY_ENABLED": "false"}
            )
        )
    first = running(relay_process(tmp_path, "first", env))
    processes.wait_until(
        lambda: terminal() >= 50, timeout=90, interval=0.05, what="work under way"
    )
    first.kill()
    assert terminal() < 600, "everything was done before the kill: nothing was tested"

    # No relay runs now: what is committed meanwhile waits, it is not lost.
    inbox_events_bulk_create(bodies(300, "b"))
    waiting = InboxEvent.objects.filter(dispatched_at__isnull=True).count()
    assert waiting >= 300

    running(relay_process(tmp_path, "second", env))
    processes.wait_until(
        lambda: terminal() == 900, timeout=180, interval=0.2, what="all 900 processed"
    )
    assert_each_applied_once(900)


def test_rows_committed_while_the_broker_restarts_are_all_processed(tmp_path, running):
    """The broker goes away under load and comes back: publishes fail meanwhile (their stamps
    roll back), and the relay publishes everything once it is back."""
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        env = {**FAST_SWEEP, "CELERY_BROKER_URL": redis.url}
        running(processes.celery_worker(tmp_path, concurrency=2, env=env))
        inbox_events_bulk_create(bodies(300, "c"))
        processes.wait_until(lambda: terminal() >= 30, timeout=90, interval=0.05)
        redis.stop()
        inbox_events_bulk_create(bodies(300, "d"))
        redis.start()
        processes.wait_until(
            lambda: terminal() == 600, timeout=180, interval=0.2, what="all processed"
        )
        assert_each_applied_once(600)
    finally:
        redis.destroy()


def test_fifty_copies_of_one_event_at_once_are_one_row_and_one_application(
    tmp_path, running, broker_url
):
    port = processes.free_port()
    running(processes.gunicorn(tmp_path, port=port, workers=2))
    url = f"http://127.0.0.1:{port}"
    processes.wait_http_ok(f"{url}/healthz")
    env = {**FAST_SWEEP, "CELERY_BROKER_URL": broker_url}
    running(processes.celery_worker(tmp_path, concurrency=2, env=env))
    WebhookSourceFactory(slug="fifty")
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])

    def send() -> int:
        with requests.Session() as session:
            return session.post(
                f"{url}/webhooks/fifty/", data=raw, headers=headers, timeout=60
            ).status_code

    statuses, errors = run_together([functools.partial(send)] * 50)

    assert not errors, errors
    assert sorted(statuses) == [200] * 49 + [202]
    row = InboxEvent.objects.get()
    assert row.delivery_count == 50
    processes.wait_until(
        lambda: terminal() == 1, timeout=60, what="the event processed"
    )
    row.refresh_from_db()
    assert row.processing_status == "processed"
    assert row.attempts == 1
    assert DocumentRevision.objects.filter(inbox_event=row).count() == 1


def test_every_relay_and_worker_killed_at_once_loses_and_repeats_nothing(
    tmp_path, running, broker_url
):
    """Workers (each with its relay) and a relay apart, all killed with SIGKILL at the same
    moment mid-stream: rows stamped but not published, messages taken but not acknowledged,
    events claimed but not finished. Rows committed while nothing runs wait. One worker
    started afterwards processes every event, each applied once. On each broker the
    product runs on."""
    env = {**FAST_SWEEP, "CELERY_BROKER_URL": broker_url}
    inbox_events_bulk_create(bodies(600, "e"))
    everyone = [
        running(processes.celery_worker(tmp_path, name=name, env=env))
        for name in ("w1", "w2")
    ]
    everyone.append(running(relay_process(tmp_path, "apart", env)))
    processes.wait_until(
        lambda: terminal() >= 50, timeout=90, interval=0.05, what="work under way"
    )
    for process in everyone:
        process.kill()
    assert terminal() < 600, "everything was done before the kill: nothing was tested"

    inbox_events_bulk_create(bodies(200, "f"))
    running(processes.celery_worker(tmp_path, name="after", env=env))
    processes.wait_until(
        lambda: terminal() == 800, timeout=240, interval=0.2, what="all 800 processed"
    )
    assert_each_applied_once(800)
