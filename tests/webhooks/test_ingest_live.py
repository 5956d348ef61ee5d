"""The ingest path on a real gunicorn server, against the test database and the Redis broker:
races decided by the database, chunked bodies, a broker that is down. No request publishes
anything: the accepted row waits for the relay, and one relay round (run here, as a worker's
relay runs it) publishes it exactly once. No worker runs, so every published message stays in
the ``celery`` list of the test broker."""

import functools
import http.client
import json
import socket
from datetime import timedelta

import pytest
import redis
import requests
from django.conf import settings
from django.db import connection
from django.utils import timezone

from core.relay.loop import Relay
from tests import processes
from tests.broker import queued_inbox_event_ids
from tests.integrations.research.factories import research_event
from tests.threads import run_together
from tests.webhooks.factories import (
    InboxEventFactory,
    WebhookSourceFactory,
    encode,
    signed_headers,
)
from webhooks.models import FingerprintMismatch, InboxEvent, InboxKey
from webhooks.partitions import DAY, INBOX, day_start, partition_name

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

THREADS = 24
MAX_BODY = 4096


def start_server(tmp_path, **env):
    port = processes.free_port()
    server = processes.gunicorn(
        tmp_path,
        port=port,
        workers=4,
        env={"WEBHOOK_MAX_BODY_BYTES": str(MAX_BODY), "LOG_LEVEL": "WARNING", **env},
    ).start()
    try:
        processes.wait_http_ok(f"http://127.0.0.1:{port}/healthz", timeout=30)
    except AssertionError:
        server.stop()
        raise AssertionError(server.log()) from None
    return server, f"http://127.0.0.1:{port}"


@pytest.fixture
def broker():
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete("celery")
    yield client
    client.delete("celery")
    client.close()


@pytest.fixture
def server(tmp_path, broker):
    server, url = start_server(tmp_path)
    yield url
    server.stop()


def responses_all_at_once(
    url: str, requests_: list[tuple[bytes, dict]]
) -> list[requests.Response]:
    def send(raw: bytes, headers: dict) -> requests.Response:
        with requests.Session() as session:
            return session.post(url, data=raw, headers=headers, timeout=60)

    responses, errors = run_together(
        [functools.partial(send, raw, headers) for raw, headers in requests_]
    )
    assert not errors, errors
    return responses


def post_all_at_once(url: str, requests_: list[tuple[bytes, dict]]) -> list[int]:
    return [response.status_code for response in responses_all_at_once(url, requests_)]


def assert_published_once_by_the_relay(broker, row: InboxEvent) -> None:
    """Nothing queued by the requests; one relay round queues exactly one message carrying
    the one row; a second round queues nothing."""
    assert broker.llen("celery") == 0
    assert row.dispatched_at is None
    assert Relay().run_once(sweep=False) == (1, False)
    assert broker.llen("celery") == 1
    assert queued_inbox_event_ids() == [row.pk]
    assert Relay().run_once(sweep=False) == (0, False)
    assert broker.llen("celery") == 1


def test_same_event_posted_by_many_threads_at_once(server, broker):
    source = WebhookSourceFactory(slug="race")
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])

    statuses = post_all_at_once(f"{server}/webhooks/race/", [(raw, headers)] * THREADS)

    assert sorted(statuses) == [200] * (THREADS - 1) + [202]
    row = InboxEvent.objects.get(source=source)
    assert row.delivery_count == THREADS
    assert row.processing_status == "received"
    assert_published_once_by_the_relay(broker, row)


def test_conflicting_bodies_posted_at_once(server, broker):
    source = WebhookSourceFactory(slug="race")
    event_id = "evt_race_conflicting"
    bodies = [
        encode(research_event(event_id=event_id, data={"summary": f"variant {n}"}))
        for n in range(THREADS)
    ]
    statuses = post_all_at_once(
        f"{server}/webhooks/race/",
        [(raw, signed_headers(raw_body=raw, event_id=event_id)) for raw in bodies],
    )

    assert sorted(statuses) == [202] + [409] * (THREADS - 1)
    row = InboxEvent.objects.get(source=source)
    assert row.delivery_count == 1
    evidence = FingerprintMismatch.objects.filter(event=row)
    assert evidence.count() == THREADS - 1
    stored = {bytes(e.raw_body) for e in evidence} | {bytes(row.raw_body)}
    assert stored == set(bodies)  # every delivery is kept: the winner or as evidence
    assert_published_once_by_the_relay(broker, row)


def github_signed(raw: bytes, delivery: str) -> dict:
    headers = signed_headers(scheme="github", raw_body=raw, event_id=delivery)
    headers["X-GitHub-Event"] = "ping"
    return headers


def test_one_github_body_under_many_delivery_ids_at_once(server, broker):
    """A signed body replayed under N fresh delivery ids at once: the database decides, one
    row; every other copy is its duplicate and names the stored event id."""
    source = WebhookSourceFactory(slug="gh-race", scheme="github", handler="github")
    raw = encode({"zen": "Keep it logically awesome.", "hook_id": 30})
    copies = [(raw, github_signed(raw, f"delivery-{n}")) for n in range(THREADS)]

    responses = responses_all_at_once(f"{server}/webhooks/gh-race/", copies)

    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * (THREADS - 1) + [202], [r.text for r in responses]
    row = InboxEvent.objects.get(source=source)
    assert row.delivery_count == THREADS
    for response in responses:
        assert response.json()["event_id"] == row.event_id
    assert_published_once_by_the_relay(broker, row)


def test_one_github_delivery_id_with_many_bodies_at_once(server, broker):
    source = WebhookSourceFactory(slug="gh-race", scheme="github", handler="github")
    bodies = [encode({"zen": f"variant {n}", "hook_id": n}) for n in range(THREADS)]
    statuses = post_all_at_once(
        f"{server}/webhooks/gh-race/",
        [(raw, github_signed(raw, "one-delivery")) for raw in bodies],
    )

    assert sorted(statuses) == [202] + [409] * (THREADS - 1)
    row = InboxEvent.objects.get(source=source)
    assert row.delivery_count == 1
    evidence = FingerprintMismatch.objects.filter(event=row)
    stored = {bytes(e.raw_body) for e in evidence} | {bytes(row.raw_body)}
    assert stored == set(bodies)
    assert_published_once_by_the_relay(broker, row)


def chunked_post(base_url: str, body: dict) -> tuple[int, bytes]:
    """``body`` signed and sent in 1000-byte chunks, with no Content-Length, to a new
    source."""
    source = WebhookSourceFactory()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        pieces = (raw[i : i + 1000] for i in range(0, len(raw), 1000))
        connection.request(
            "POST",
            f"/webhooks/{source.slug}/",
            body=pieces,
            headers={**headers, "Content-Type": "application/json"},
            encode_chunked=True,
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_chunked_body_without_content_length(server, broker):
    body = research_event()
    status, content = chunked_post(server, body)
    assert status == 202, content
    assert bytes(InboxEvent.objects.get().raw_body) == encode(body)


def test_chunked_body_over_the_limit_is_413(server, broker):
    body = research_event(data={"summary": "x" * (MAX_BODY * 3)})
    status, content = chunked_post(server, body)
    assert status == 413
    assert b"payload_too_large" in content
    assert not InboxEvent.objects.exists()


def raw_exchange(
    base_url: str, request: bytes, *, close_after: bool = False
) -> tuple[int, bytes]:
    """``request`` as bytes on one connection (``close_after``: the client then closes its
    side, as one that went away mid-body); the server's status and body."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        if close_after:
            sock.shutdown(socket.SHUT_WR)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read()


def chunked_request(slug: str, chunks: bytes) -> bytes:
    return (
        f"POST /webhooks/{slug}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + chunks


@pytest.mark.parametrize(
    ("chunks", "close_after"),
    [
        (b"zz\r\nhello\r\n0\r\n\r\n", False),  # a chunk size that is not hex
        (b"5\r\nhelloXX0\r\n\r\n", False),  # a chunk without its CRLF
        (b"10\r\nhello", True),  # the client went away in the middle of a chunk
        (b"5\r\nhello\r\n", True),  # ... or before the last chunk
    ],
    ids=["bad-chunk-size", "missing-terminator", "ended-mid-chunk", "ended-early"],
)
def test_an_unreadable_chunked_body_is_400_and_stores_nothing(
    server, broker, chunks, close_after
):
    WebhookSourceFactory(slug="unreadable")
    status, body = raw_exchange(
        server, chunked_request("unreadable", chunks), close_after=close_after
    )
    assert status == 400, body
    assert json.loads(body) == {"error": "invalid_body"}
    assert not InboxEvent.objects.exists()


def test_a_body_shorter_than_its_declared_length_is_400_and_stores_nothing(
    server, broker
):
    """The client sends part of the ``Content-Length`` it declared, then goes away."""
    WebhookSourceFactory(slug="unreadable")
    request = (
        b"POST /webhooks/unreadable/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{}"
    )
    status, body = raw_exchange(server, request, close_after=True)
    assert status == 400, body
    assert json.loads(body) == {"error": "invalid_body"}
    assert not InboxEvent.objects.exists()


def test_broker_down_still_accepts_and_leaves_the_row_waiting_for_the_relay(
    tmp_path, broker
):
    # A real closed port: the request path never connects to it.
    server, url = start_server(
        tmp_path, CELERY_BROKER_URL=f"redis://127.0.0.1:{processes.free_port()}/0"
    )
    try:
        WebhookSourceFactory(slug="nobroker")
        body = research_event()
        raw = encode(body)
        headers = signed_headers(raw_body=raw, event_id=body["event_id"])
        response = requests.post(
            f"{url}/webhooks/nobroker/", data=raw, headers=headers, timeout=30
        )
        assert response.status_code == 202, response.text
        assert response.elapsed.total_seconds() < 5  # no broker call to wait for
        row = InboxEvent.objects.get()
        assert row.processing_status == "received"
        again = requests.post(
            f"{url}/webhooks/nobroker/", data=raw, headers=headers, timeout=30
        )
        assert again.status_code == 200
    finally:
        server.stop()
    assert "publish" not in server.log()
    # Once a relay reaches a broker, the row is published, once.
    assert_published_once_by_the_relay(broker, row)


def test_thirty_events_times_ten_copies_straddling_two_days_partitions(server, broker):
    """Half of the events were first received the other side of a midnight (their rows in
    tomorrow's partition, as a row received just before a midnight is in the day before's);
    ten copies of each of the thirty arrive at once. The ledger decides across the days:
    one new row per new event, every copy counted on its event's row, wherever it is."""
    source = WebhookSourceFactory(slug="race")
    bodies = [research_event() for _ in range(30)]
    before_midnight = day_start(timezone.now()) + DAY + timedelta(seconds=1)
    earlier = [
        InboxEventFactory(body=body, source=source, received_at=before_midnight)
        for body in bodies[:15]
    ]
    requests_ = []
    for body in bodies:
        raw = encode(body)
        requests_ += [
            (raw, signed_headers(raw_body=raw, event_id=body["event_id"]))
        ] * 10

    statuses = post_all_at_once(f"{server}/webhooks/race/", requests_)

    assert statuses.count(202) == 15 and statuses.count(200) == 285
    rows = {row.event_id: row for row in InboxEvent.objects.filter(source=source)}
    assert len(rows) == 30
    for row in earlier:
        assert rows[row.event_id].pk == row.pk
        assert rows[row.event_id].delivery_count == 11
    for body in bodies[15:]:
        assert rows[body["event_id"]].delivery_count == 10
    keys = dict(
        InboxKey.objects.filter(source=source).values_list("event_id", "delivery_count")
    )
    assert keys == {event_id: row.delivery_count for event_id, row in rows.items()}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT event_id, tableoid::regclass::text FROM webhooks_inboxevent"
            " WHERE source_id = %s",
            [source.pk],
        )
        where = dict(cursor.fetchall())
    tomorrow = partition_name(INBOX, day_start(before_midnight))
    assert {where[row.event_id] for row in earlier} == {tomorrow}
    assert tomorrow not in {where[body["event_id"]] for body in bodies[15:]}
