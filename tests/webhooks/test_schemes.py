"""The verifiers against the published test vectors and the reference library."""

import base64
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from webhooks.errors import InvalidSignature
from webhooks.schemes import scheme_get, signature_headers

SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIMESTAMP = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
GH_SECRET = "It's a Secret to Everybody"
GH_BODY = b"Hello, World!"
GH_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def sw_headers(signature: str) -> dict[str, str]:
    return {
        "webhook-id": SW_ID,
        "webhook-timestamp": str(SW_TIMESTAMP),
        "webhook-signature": signature,
    }


def test_standard_webhooks_published_vector_is_what_the_reference_library_signs():
    signed_at = datetime.fromtimestamp(SW_TIMESTAMP, tz=UTC)
    assert Webhook(SW_SECRET).sign(SW_ID, signed_at, SW_BODY.decode()) == SW_SIGNATURE


def test_standard_webhooks_verifies_the_published_vector():
    verified = scheme_get("standard-webhooks").verify(
        raw_body=SW_BODY, headers=sw_headers(SW_SIGNATURE), secrets=[SW_SECRET]
    )
    assert verified.event_id == SW_ID
    assert verified.timestamp == str(SW_TIMESTAMP)


def test_standard_webhooks_headers_we_produce_match_the_reference_library():
    ours = signature_headers(
        scheme="standard-webhooks",
        secret=SW_SECRET,
        raw_body=SW_BODY,
        event_id=SW_ID,
        timestamp=SW_TIMESTAMP,
    )
    assert ours["webhook-signature"] == SW_SIGNATURE


def test_github_published_vector():
    verified = scheme_get("github").verify(
        raw_body=GH_BODY,
        headers={"X-Hub-Signature-256": GH_SIGNATURE, "X-GitHub-Delivery": "d-1"},
        secrets=[GH_SECRET],
    )
    assert verified.event_id == "d-1"
    assert verified.timestamp is None


@pytest.mark.parametrize(
    "signature",
    [
        f"v1,{base64.b64encode(b'x' * 32).decode()} {SW_SIGNATURE}",
        f"v2,abc v1a,zzz {SW_SIGNATURE}",
        f"v0,{SW_SIGNATURE[3:]} {SW_SIGNATURE} v1,not-base64!",
    ],
)
def test_standard_webhooks_any_valid_entry_passes_and_unknown_versions_are_skipped(
    signature,
):
    scheme_get("standard-webhooks").verify(
        raw_body=SW_BODY, headers=sw_headers(signature), secrets=[SW_SECRET]
    )


def test_the_raw_bytes_are_signed_not_reserialised_json():
    with pytest.raises(InvalidSignature) as excinfo:
        scheme_get("standard-webhooks").verify(
            raw_body=b'{"test":2432232314}',
            headers=sw_headers(SW_SIGNATURE),
            secrets=[SW_SECRET],
        )
    assert excinfo.value.reason == "mismatch"


@pytest.mark.parametrize(
    ("scheme", "headers", "reason"),
    [
        ("hmac-sha256", {"X-Webhook-Timestamp": "1"}, "missing"),
        ("hmac-sha256", {"X-Webhook-Signature": "v1=" + "a" * 64}, "missing"),
        (
            "hmac-sha256",
            {"X-Webhook-Signature": "  ", "X-Webhook-Timestamp": "1"},
            "missing",
        ),
        (
            "hmac-sha256",
            {"X-Webhook-Signature": "v2=" + "a" * 64, "X-Webhook-Timestamp": "1"},
            "malformed",
        ),
        (
            "hmac-sha256",
            {"X-Webhook-Signature": "v1=xyz", "X-Webhook-Timestamp": "1"},
            "malformed",
        ),
        (
            "hmac-sha256",
            {"X-Webhook-Signature": "v1=" + "a" * 64, "X-Webhook-Timestamp": "1"},
            "mismatch",
        ),
        ("standard-webhooks", {"webhook-timestamp": "1"}, "missing"),
        ("standard-webhooks", sw_headers("v1,%%%"), "malformed"),
        ("standard-webhooks", sw_headers("v1=" + SW_SIGNATURE[3:]), "malformed"),
        ("github", {}, "missing"),
        ("github", {"X-Hub-Signature-256": "sha1=" + "a" * 40}, "malformed"),
        ("github", {"X-Hub-Signature-256": "sha256=" + "0" * 64}, "mismatch"),
    ],
)
def test_failure_reasons(scheme, headers, reason):
    secret = SW_SECRET if scheme == "standard-webhooks" else GH_SECRET
    with pytest.raises(InvalidSignature) as excinfo:
        scheme_get(scheme).verify(raw_body=SW_BODY, headers=headers, secrets=[secret])
    assert excinfo.value.reason == reason


def test_hmac_sha256_accepts_comma_or_space_separated_signatures_and_any_secret():
    good = signature_headers(
        scheme="hmac-sha256", secret="new", raw_body=b"{}", event_id="e", timestamp=5
    )["X-Webhook-Signature"]
    for joined in (f"v1={'b' * 64},{good}", f"v0=zz {good}", f"{good}, v1={'c' * 64}"):
        scheme_get("hmac-sha256").verify(
            raw_body=b"{}",
            headers={"X-Webhook-Signature": joined, "X-Webhook-Timestamp": "5"},
            secrets=["old", "new"],
        )
