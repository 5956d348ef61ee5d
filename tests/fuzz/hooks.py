"""schemathesis hooks for a run against this API (docs/http-api.md, "Fuzzing the API";
tests/test_api_schema_fuzz.py): what a client must do that an OpenAPI schema cannot say.

- **Signed webhooks.** A delivery to ``POST /webhooks/<slug>/`` is signed with the source's
  secret (``hmac-sha256``: ``X-Webhook-Signature: v1=<hex>`` over ``<timestamp>.`` and the
  bytes sent, a timestamp of now, the body's ``event_id`` as ``X-Webhook-Id``), as its
  producer signs it, so that generated envelopes reach the checks behind the signature.
  The run pins ``slug`` to one ``hmac-sha256`` source (``RETRYSAFE_FUZZ_SOURCE``, its
  secret ``RETRYSAFE_FUZZ_SOURCE_SECRET``).
- **Instants the clock decides.** A status report dated later than now (plus the webhooks'
  tolerance) is refused, and a producer's date must lie between 0001-01-02 and 9999-12-31
  in UTC: OpenAPI's ``date-time`` has no bounds, and "now" moves. A generated instant
  outside those bounds is moved inside (same time of day, another date), so that a valid
  request stays valid; any other value is sent as generated.

Nothing else is changed: every value, header and body the run sends is the generated one.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis
from requests.models import complexjson
from schemathesis.core import NotSet

WEBHOOK_PATH = "/webhooks/{slug}/"
STATUS_SYNC_PATH = "/api/status-sync/"
EARLIEST = datetime(1, 1, 3, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
# RFC 3339's date-time, as the schema's ``format`` reads it.
RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)
# An event id a header can carry as it is (the envelope's own rule): no control character,
# no space at either end.
HEADER_SAFE = re.compile(
    r"[^\x00-\x1f\x7f ](?:[^\x00-\x1f\x7f]*[^\x00-\x1f\x7f ])?", re.DOTALL
)


def _out_of_bounds(value: str, *, latest: datetime) -> bool:
    """Whether an RFC 3339 date-time names a real instant outside the bounds (a text that
    is no date-time, or no real date, is left as the generator made it)."""
    if not RFC3339.fullmatch(value):
        return False
    try:
        local = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    try:
        instant = local.astimezone(UTC)
    except (
        OverflowError
    ):  # a real local time whose UTC reading is before year 1 or after 9999
        return True
    return not EARLIEST <= instant <= latest


def _within(value: Any, *, latest: datetime) -> Any:
    """``value``, or for an instant outside the bounds the same text with another date (a
    day chosen from the value, so that runs repeat)."""
    if not isinstance(value, str) or not _out_of_bounds(value, latest=latest):
        return value
    days = zlib.crc32(value.encode("utf-8", "surrogatepass")) % 3650
    day = (latest - timedelta(days=30 + days)).date()
    return f"{day.isoformat()}{value[10:]}"


def _report_within_bounds(body: Any) -> None:
    if isinstance(body, dict) and "reported_at" in body:
        body["reported_at"] = _within(body["reported_at"], latest=datetime.now(UTC))


def _envelope_within_bounds(body: Any) -> None:
    if not isinstance(body, dict):
        return
    for name in ("occurred_at", "delivered_at"):
        if name in body:
            body[name] = _within(body[name], latest=LATEST)
    source = body.get("source")
    if isinstance(source, dict) and "published_at" in source:
        source["published_at"] = _within(source["published_at"], latest=LATEST)


def _bytes_sent(body: Any) -> bytes:
    """The body as the run's transport (requests) sends it."""
    if body is None:
        return b"null"
    if isinstance(body, bytes):
        return body
    text = complexjson.dumps(body, allow_nan=False)
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _sign(case) -> None:
    secret = os.environ["RETRYSAFE_FUZZ_SOURCE_SECRET"]
    body = None if isinstance(case.body, NotSet) else case.body
    raw = b"" if isinstance(case.body, NotSet) else _bytes_sent(body)
    event_id = body.get("event_id") if isinstance(body, dict) else None
    if isinstance(event_id, str) and HEADER_SAFE.fullmatch(event_id):
        # Its UTF-8 bytes, as a producer writes them: requests sends a header's text one
        # byte a character (Latin-1).
        event_id = event_id.encode("utf-8", "surrogatepass").decode("latin-1")
    else:
        # No header can name it as it is: the envelope's own rules refuse such an id.
        event_id = "fuzz-" + hashlib.sha256(raw).hexdigest()[:16]
    timestamp = str(int(time.time()))
    signature = hmac.new(
        secret.encode(), timestamp.encode() + b"." + raw, hashlib.sha256
    ).hexdigest()
    headers = dict(case.headers or {})
    headers.update(
        {
            "X-Webhook-Id": event_id,
            "X-Webhook-Timestamp": timestamp,
            "X-Webhook-Signature": f"v1={signature}",
        }
    )
    case.headers = headers


@schemathesis.hook
def before_call(context, case, kwargs):
    operation = (case.operation.method.upper(), case.operation.path)
    if operation == ("POST", STATUS_SYNC_PATH):
        _report_within_bounds(case.body)
    elif operation == ("POST", WEBHOOK_PATH):
        _envelope_within_bounds(case.body)
        _sign(case)
