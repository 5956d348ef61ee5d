"""The bare floors of ``make bench``'s ingest figures: a plain view's one insert of a row as
wide as the inbox's (docs/bench-log/2026-12-03.md, "The bare floor, a row as wide as the
inbox's"), and the three-column floor, the plainest receiver: the HMAC, then one insert."""

import json
import time

import pytest
from django.db import connection
from django.test import RequestFactory

from bench.views import (
    BENCH_WEBHOOK_SECRET,
    HMAC_FLOOR_TABLE,
    WIDE_FLOOR_TABLE,
    bare_insert_hmac,
    bare_insert_wide,
    hmac_floor_table_sql,
    wide_floor_table_sql,
)
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import RESEARCH_SOURCE, encode, signed_post
from webhooks.models import InboxEvent
from webhooks.schemes import signature_headers

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="the benchmarks run on PostgreSQL only (the floor's table is LIKE the inbox)",
    ),
]


def _columns(table: str) -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_name = %s ORDER BY ordinal_position",
            [table],
        )
        return cursor.fetchall()


def _one(statement: str, params=None):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchone()


def test_the_bare_floor_inserts_one_row_as_wide_as_the_inbox_row_of_the_same_delivery(
    client, source
):
    with connection.cursor() as cursor:
        for statement in wide_floor_table_sql():
            cursor.execute(statement)
    body = research_event(number=7, event_id="evt-floor-7", source_version=7)
    raw = encode(body)
    response = signed_post(client, RESEARCH_SOURCE, raw, event_id="evt-floor-7")
    assert response.status_code == 202
    request = RequestFactory().post(
        "/_bench/bare-insert-wide",
        data=raw,
        content_type="application/json",
        headers={"X-Bench-Id": "evt-floor-7"},
    )

    answer = bare_insert_wide(request)

    assert answer.status_code == 202
    assert _columns(WIDE_FLOOR_TABLE) == _columns(InboxEvent._meta.db_table)
    # Its primary key and nothing else: no index of the inbox's, no foreign key.
    assert _one(
        "SELECT count(*) FROM pg_indexes WHERE tablename = %s", [WIDE_FLOOR_TABLE]
    ) == (1,)
    assert _one(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = %s::regclass"
        " AND contype = 'f'",
        [WIDE_FLOOR_TABLE],
    ) == (0,)
    floor_bytes, floor_body = _one(
        f"SELECT pg_column_size(t.*), raw_body FROM {WIDE_FLOOR_TABLE} t"  # noqa: S608
        " WHERE event_id = 'evt-floor-7'"
    )
    (inbox_bytes,) = _one(
        "SELECT pg_column_size(t.*) FROM webhooks_inboxevent t"
        " WHERE event_id = 'evt-floor-7'"
    )
    assert bytes(floor_body) == raw
    # The same width within the few bytes of values that differ (the template's stand-ins
    # for the fingerprints and headers of this delivery).
    assert abs(floor_bytes - inbox_bytes) <= 0.1 * inbox_bytes, (
        floor_bytes,
        inbox_bytes,
    )


def _hmac_floor_post(
    raw: bytes, *, event_id: str, timestamp: int | None = None, **change
):
    headers = signature_headers(
        scheme="hmac-sha256",
        secret=BENCH_WEBHOOK_SECRET,
        raw_body=raw,
        event_id=event_id,
        timestamp=int(time.time()) if timestamp is None else timestamp,
    )
    headers.update(change)
    request = RequestFactory().post(
        "/_bench/bare-insert-hmac",
        data=raw,
        content_type="application/json",
        headers=headers,
    )
    return bare_insert_hmac(request)


def test_the_three_column_floor_checks_the_hmac_then_inserts_the_event_once():
    with connection.cursor() as cursor:
        for statement in hmac_floor_table_sql():
            cursor.execute(statement)
    body = research_event(number=8, event_id="evt-floor-8", source_version=8)
    raw = encode(body)

    first = _hmac_floor_post(raw, event_id="evt-floor-8")
    again = _hmac_floor_post(raw, event_id="evt-floor-8")
    forged = _hmac_floor_post(
        raw, event_id="evt-floor-9", **{"X-Webhook-Signature": "v1=00"}
    )
    stale = _hmac_floor_post(
        raw, event_id="evt-floor-10", timestamp=int(time.time()) - 3600
    )

    assert (first.status_code, again.status_code) == (202, 202)
    assert (forged.status_code, stale.status_code) == (401, 400)
    assert [c for c, _ in _columns(HMAC_FLOOR_TABLE)] == [
        "event_id",
        "payload",
        "received_at",
    ]
    (count,) = _one(f"SELECT count(*) FROM {HMAC_FLOOR_TABLE}")  # noqa: S608
    event_id, payload = _one(
        f"SELECT event_id, payload::text FROM {HMAC_FLOOR_TABLE}"  # noqa: S608
    )
    assert (count, event_id) == (1, "evt-floor-8")
    assert json.loads(payload) == body
