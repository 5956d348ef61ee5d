"""Fuzzing the view with hypothesis: whatever the headers and the body, no 5xx, and no inbox row
from a request that is not signed with the source's secret."""

import json

import pytest
from django.test import Client
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.examples import max_examples
from tests.webhooks.factories import WebhookSourceFactory, signed_headers, webhook_post
from webhooks.models import InboxEvent

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=max_examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HEADER_NAMES = [
    "X-Webhook-Id",
    "X-Webhook-Timestamp",
    "X-Webhook-Signature",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "X-Hub-Signature-256",
    "X-GitHub-Delivery",
    "X-GitHub-Event",
]
# WSGI header values are Latin-1 strings.
header_values = st.one_of(
    st.text(alphabet=st.characters(max_codepoint=255), max_size=80),
    st.from_regex(r"v1=[0-9a-f]{64}( v1=[0-9a-f]{0,70})?", fullmatch=True),
    st.from_regex(r"v1,[A-Za-z0-9+/=]{0,50}", fullmatch=True),
    st.from_regex(r"sha256=[0-9a-fA-F]{60,66}", fullmatch=True),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
envelope_like = st.fixed_dictionaries(
    {},
    optional={
        "event_id": st.one_of(st.text(max_size=140), json_values),
        "event_type": st.one_of(
            st.sampled_from(["research.document.created", "research.document.updated"]),
            st.text(max_size=140),
            json_values,
        ),
        "occurred_at": st.one_of(
            st.sampled_from(
                ["2026-11-30T18:00:00Z", "2026-11-30", "2026-11-30T25:00Z"]
            ),
            st.text(max_size=40),
            json_values,
        ),
        "entity": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "entity_id": st.one_of(st.text(max_size=140), json_values),
                    "entity_type": st.one_of(st.text(max_size=20), json_values),
                    "source_version": st.one_of(st.integers(), json_values),
                },
            ),
            json_values,
        ),
        "source": st.one_of(
            st.fixed_dictionaries(
                {}, optional={"url": st.text(), "content_hash": st.text()}
            ),
            json_values,
        ),
        "tenant_id": json_values,
        "idempotency_key": json_values,
        "delivered_at": json_values,
        "delivery_attempt": json_values,
        "data": json_values,
    },
)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    envelope_like.map(lambda v: json.dumps(v, ensure_ascii=False).encode()),
)


@pytest.fixture
def sources(db):
    return {
        "hmac": WebhookSourceFactory(slug="fz-hmac"),
        "sw": WebhookSourceFactory(slug="fz-sw", scheme="standard-webhooks"),
        "gh": WebhookSourceFactory(slug="fz-gh", scheme="github", handler="github"),
    }


@FUZZ
@given(
    slug=st.sampled_from(["fz-hmac", "fz-sw", "fz-gh"]),
    headers=st.dictionaries(st.sampled_from(HEADER_NAMES), header_values),
    raw=bodies,
)
def test_unsigned_requests_never_5xx_and_never_store(sources, slug, headers, raw):
    response = webhook_post(Client(), slug, raw, headers)
    assert response.status_code in (400, 401), response.content
    assert not InboxEvent.objects.exists()


@FUZZ
@given(
    scheme=st.sampled_from(["hmac-sha256", "standard-webhooks", "github"]),
    event_id=st.text(alphabet=st.characters(max_codepoint=255), max_size=140),
    github_event=st.text(alphabet=st.characters(max_codepoint=255), max_size=20),
    raw=bodies,
    use_body_id=st.booleans(),
    timestamp=st.one_of(
        st.none(),
        st.integers(min_value=0, max_value=2**40),
        st.integers(min_value=-(10**500), max_value=10**500),
    ),
)
def test_signed_requests_with_any_body_never_5xx(
    sources, scheme, event_id, github_event, raw, use_body_id, timestamp
):
    slug = {"hmac-sha256": "fz-hmac", "standard-webhooks": "fz-sw", "github": "fz-gh"}
    if use_body_id:  # reach the envelope checks and the insert, not only the id check
        try:
            body_id = json.loads(raw).get("event_id")
        except (ValueError, AttributeError):
            body_id = None
        if isinstance(body_id, str) and all(ord(c) < 128 for c in body_id):
            event_id = body_id
    headers = signed_headers(
        scheme=scheme, raw_body=raw, event_id=event_id, timestamp=timestamp
    )
    if scheme == "github":
        headers["X-GitHub-Event"] = github_event
    before = InboxEvent.objects.count()
    response = webhook_post(Client(), slug[scheme], raw, headers)
    assert response.status_code in (200, 202, 400, 401, 409, 422), response.content
    created = InboxEvent.objects.count() - before
    event(f"status {response.status_code}")
    assert created == (1 if response.status_code == 202 else 0)
