"""Webhook secrets and signatures are never shown: not by /metrics, not by the API, not in the
frames of an error page or report; and every signature check compares every candidate with
every secret in constant time."""

import base64
import hmac

import pytest
from django.test import Client
from django.views.debug import ExceptionReporter

from core.signing import standard_webhooks_key
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    HMAC_SECRET,
    SECRETS,
    WebhookSourceFactory,
    encode,
    signed_headers,
    webhook_post,
)
from webhooks.schemes import scheme_get, scheme_names
from webhooks.selectors import webhook_source_snapshot

pytestmark = pytest.mark.django_db


def test_metrics_and_the_event_api_never_show_a_secret_or_a_signature(client, api):
    WebhookSourceFactory(slug="exposure")
    body = research_event(event_id="evt_exposure_1")
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    forged = headers | {"X-Webhook-Signature": "v1=" + "cd" * 32}
    for sent, status in ((forged, 401), (headers, 202), (headers, 200)):
        response = webhook_post(client, "exposure", raw, sent)
        assert response.status_code == status

    metrics = client.get("/metrics").content.decode()
    event = api.get("/api/webhooks/exposure/events/evt_exposure_1/")
    assert event.status_code == 200
    # Both name the source and the event: they do show what they are about.
    assert 'source="exposure"' in metrics
    assert event.json()["delivery_count"] == 2
    signature = headers["X-Webhook-Signature"].removeprefix("v1=")
    for text in (metrics, event.content.decode()):
        for hidden in (HMAC_SECRET, signature, signature[:12], "cd" * 32):
            assert hidden not in text


# A second, wrong signature entry in each scheme's format, and a secret that matches nothing.
WRONG_ENTRY = {
    "hmac-sha256": ",v1=" + "0" * 64,
    "standard-webhooks": " v1," + base64.b64encode(bytes(32)).decode(),
    "github": ",sha256=" + "0" * 64,
}
WRONG_SECRET = {
    "hmac-sha256": "not-the-secret",
    "standard-webhooks": "whsec_" + base64.b64encode(bytes(24)).decode(),
    "github": "not-the-secret",
}


@pytest.mark.parametrize("scheme", scheme_names())
def test_every_entry_is_compared_with_every_secret_in_constant_time(
    monkeypatch, scheme
):
    """No early exit that would tell, by timing, which secret or which entry matched: with the
    valid entry first and the right secret last, all four pairs are still compared."""
    calls = []
    original = hmac.compare_digest

    def compare_digest(a, b):
        calls.append((a, b))
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare_digest)
    raw = encode(research_event())
    headers = signed_headers(scheme=scheme, raw_body=raw, event_id="evt_ct")
    header = next(name for name in headers if "signature" in name.lower())
    headers[header] += WRONG_ENTRY[scheme]

    verified = scheme_get(scheme).verify(
        raw_body=raw, headers=headers, secrets=[WRONG_SECRET[scheme], SECRETS[scheme]]
    )

    assert verified.event_id == "evt_ct"
    assert len(calls) == 4


@pytest.mark.parametrize("scheme", scheme_names())
def test_an_error_while_verifying_shows_no_secret_in_the_view_or_the_scheme(
    monkeypatch, settings, error_records, scheme
):
    """An unexpected error inside a signature check, with DEBUG on (a forgotten variable):
    the debug page, and the frames of the webhook view, of the scheme's ``verify`` and of
    what it calls in an error report, show their variables' names, never the source's
    secrets."""
    settings.DEBUG = True

    def unavailable(candidates, expected):
        raise RuntimeError("digest comparison unavailable")

    # Every scheme compares through the helper of webhooks.schemes (GitHub's imports it).
    monkeypatch.setattr("webhooks.schemes.first_match", unavailable)
    monkeypatch.setattr("integrations.github.scheme.first_match", unavailable)
    WebhookSourceFactory(slug="debugged", scheme=scheme)
    raw = encode(research_event(event_id="evt_debugged"))
    headers = signed_headers(scheme=scheme, raw_body=raw, event_id="evt_debugged")
    http = Client(raise_request_exception=False)
    response = webhook_post(http, "debugged", raw, headers, HTTP_ACCEPT="text/html")
    assert response.status_code == 500
    assert b"digest comparison unavailable" in response.content
    secret = SECRETS[scheme]
    assert secret not in response.content.decode()
    [record] = error_records
    reporter = ExceptionReporter(record.request, *record.exc_info)
    frames = {
        frame["function"]: dict(frame["vars"])
        for frame in reporter.get_traceback_frames()
    }
    key = standard_webhooks_key(secret) if scheme == "standard-webhooks" else b""
    for function in ("webhook_receive", "verify", "unavailable"):
        assert function in frames
        shown = repr(frames[function])
        assert secret not in shown, (function, shown)
        assert not key or repr(key)[2:-1] not in shown


def test_a_source_snapshot_names_no_secret():
    WebhookSourceFactory(slug="snapshot-repr")
    snapshot = webhook_source_snapshot(slug="snapshot-repr", fresh=True)
    assert snapshot.secrets_valid() == [HMAC_SECRET]
    assert HMAC_SECRET not in repr(snapshot)
    assert HMAC_SECRET not in str(snapshot)
