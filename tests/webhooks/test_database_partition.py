"""A database that stops answering, through a real TCP proxy between the product's processes
and PostgreSQL (``tests.outages.TcpProxy``): a partition that holds every byte, not a refused
connection. The web answers 503 with ``Retry-After`` within seconds, not after gunicorn's
timeout, and accepts again once the link heals; a statement the database is slow to answer
is bounded the same way; the workers ride out the same cuts."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import requests
from django.db import connection, transaction

from research.models import DocumentRevision
from tests import processes
from tests.core.test_web_server import production_gunicorn
from tests.integrations.research.factories import research_event
from tests.outages import TcpProxy
from tests.webhooks.factories import (
    WebhookSourceFactory,
    encode,
    inbox_events_bulk_create,
    signed_headers,
)
from webhooks.models import InboxEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

GUNICORN_TIMEOUT = 60
# What "within seconds" means here: the web's bounds (docs/scaling.md, "Database timeouts")
# with room for a loaded machine, far below gunicorn's timeout.
ANSWERED_WITHIN = 15


@pytest.fixture
def db_proxy():
    settings_dict = connection.settings_dict
    proxy = TcpProxy(
        settings_dict.get("HOST") or "127.0.0.1", int(settings_dict.get("PORT") or 5432)
    )
    yield proxy
    proxy.close()

    # The sessions that went through it end with it: none is left to keep the test
    # database from being dropped.
    def others() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0]

    with contextlib.suppress(AssertionError):
        processes.wait_until(lambda: others() == 0, timeout=10)


def through(proxy: TcpProxy) -> str:
    """The test database's URL, by way of ``proxy``."""
    url = processes.test_database_url()
    host_port = url.split("@")[-1].split("/")[0]
    return url.replace(host_port, f"127.0.0.1:{proxy.port}")


def delivery(base: str, body: dict | None = None, *, timeout: float = 30):
    body = body or research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    return requests.post(
        f"{base}/webhooks/res/", data=raw, headers=headers, timeout=timeout
    )


def answer_in_time(
    base: str, body: dict | None = None
) -> tuple[requests.Response, float]:
    started = time.monotonic()
    try:
        response = delivery(base, body, timeout=GUNICORN_TIMEOUT + 10)
    except requests.RequestException as exc:
        raise AssertionError(
            f"no answer after {time.monotonic() - started:.1f} s: {exc}"
        ) from None
    return response, time.monotonic() - started


def assert_unavailable(response: requests.Response, elapsed: float) -> None:
    assert response.status_code == 503, response.text
    assert response.json() == {"error": "temporarily_unavailable"}
    assert int(response.headers["Retry-After"]) > 0
    assert elapsed < ANSWERED_WITHIN, f"answered after {elapsed:.1f} s"


@pytest.mark.parametrize(
    "conn_max_age", ["60", "0"], ids=["kept-connection", "new-connection"]
)
def test_ingest_is_503_within_seconds_while_the_database_stops_answering(
    tmp_path, db_proxy, conn_max_age
):
    """Production settings, one sync worker, with its connection kept between requests (the
    default) or opened for each (behind PgBouncer, as compose runs web)."""
    WebhookSourceFactory(slug="res")
    with production_gunicorn(
        tmp_path,
        DATABASE_URL=through(db_proxy),
        DATABASE_CONN_MAX_AGE=conn_max_age,
        DJANGO_HTTPS="false",
        GUNICORN_TIMEOUT=str(GUNICORN_TIMEOUT),
    ) as (base, server):
        assert delivery(base).status_code == 202
        db_proxy.hold()
        response, elapsed = answer_in_time(base)
        assert_unavailable(response, elapsed)
        # The worker was not killed for it: the same process answers the next request.
        assert "WORKER TIMEOUT" not in server.log()
        db_proxy.heal()
        # The producer's retry is accepted once the link heals.
        retry = research_event()
        processes.wait_until(
            lambda: delivery(base, retry).status_code in (200, 202),
            timeout=30,
            what="a delivery accepted again",
        )
    assert InboxEvent.objects.filter(event_id=retry["event_id"]).exists()


def test_a_statement_the_database_is_slow_to_answer_is_503_within_seconds(tmp_path):
    """The database answers, but not in time: the delivery's insert waits on a row lock held
    by another transaction. The web's statement timeout ends the wait."""
    source = WebhookSourceFactory(slug="res")
    body = research_event()
    with production_gunicorn(
        tmp_path, DJANGO_HTTPS="false", GUNICORN_TIMEOUT=str(GUNICORN_TIMEOUT)
    ) as (base, _):
        holding, release = threading.Event(), threading.Event()

        def hold_the_row():
            # Another transaction inserted the same event and has not committed yet.
            with transaction.atomic():
                inbox_events_bulk_create([body], source=source)
                holding.set()
                release.wait(GUNICORN_TIMEOUT + 10)
                transaction.set_rollback(True)
            connection.close()

        holder = threading.Thread(target=hold_the_row)
        holder.start()
        try:
            assert holding.wait(30)
            response, elapsed = answer_in_time(base, body)
        finally:
            release.set()
            holder.join()
        assert_unavailable(response, elapsed)
        assert delivery(base, body).status_code == 202


# --- workers -------------------------------------------------------------------------------

FAST_SWEEP = {
    "INBOX_SWEEP_INTERVAL_SECONDS": "1",
    "INBOX_REDISPATCH_AFTER_SECONDS": "2",
    "INBOX_PROCESSING_LEASE_SECONDS": "10",
    "INBOX_RETRY_BASE_SECONDS": "0.2",
    "INBOX_RETRY_MAX_SECONDS": "2",
    "INBOX_MAX_ATTEMPTS": "50",
}


@contextlib.contextmanager
def broker_proxy():
    from django.conf import settings

    url = settings.CELERY_BROKER_URL
    host_port, _, database = url.removeprefix("redis://").partition("/")
    host, _, port = host_port.partition(":")
    proxy = TcpProxy(host, int(port or 6379))
    try:
        yield proxy, f"redis://127.0.0.1:{proxy.port}/{database}"
    finally:
        proxy.close()


def test_workers_ride_out_resets_a_partition_and_a_slow_link(tmp_path, db_proxy):
    """A worker whose database and broker links are cut: a reset of PostgreSQL's
    connections, a partition longer than the web's bounds, a reset of the broker's and a
    slow link. Every event committed meanwhile is processed, once."""
    processes.purge_broker()
    with broker_proxy() as (broker, broker_url):
        worker = processes.celery_worker(
            tmp_path,
            concurrency=2,
            env={
                **FAST_SWEEP,
                "DATABASE_URL": through(db_proxy),
                "CELERY_BROKER_URL": broker_url,
            },
        ).start()
        committed: list[str] = []

        def events(n: int) -> None:
            bodies = [research_event() for _ in range(n)]
            inbox_events_bulk_create(bodies)
            committed.extend(body["event_id"] for body in bodies)

        def all_processed(what: str) -> None:
            try:
                processes.wait_until(
                    lambda: (
                        InboxEvent.objects.filter(
                            event_id__in=committed, processing_status="processed"
                        ).count()
                        == len(committed)
                    ),
                    timeout=90,
                    what=what,
                )
            except AssertionError:
                raise AssertionError(worker.log()[-4000:]) from None

        try:
            events(5)
            all_processed("the first events")
            # The worker's links do go through the proxies.
            assert db_proxy.accepted() > 0
            assert broker.accepted() > 0
            db_proxy.reset()
            events(5)
            all_processed("events after PostgreSQL's connections were reset")
            db_proxy.hold()
            events(5)
            time.sleep(10)  # longer than every bound of the web
            db_proxy.heal()
            all_processed("events after a partition of 10 s")
            broker.reset()
            events(5)
            all_processed("events after the broker's connections were reset")
            db_proxy.slow(0.05)
            broker.slow(0.05)
            events(5)
            all_processed("events over a slow link")
            assert worker.alive(), worker.log()[-3000:]
        finally:
            db_proxy.heal()
            broker.heal()
            worker.stop()
    # Each applied once: one revision per event.
    revisions = DocumentRevision.objects.filter(event_id__in=committed)
    assert sorted(revisions.values_list("event_id", flat=True)) == sorted(committed)
