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


# --- Standard Webhooks v1a (Ed25519) ----------------------------------------------------------
# The reference library's published v1a vector (its Go implementation's asymmetric test, over
# the same message as the v1 vector above): the private key is ``whsk_`` + base64 of the
# 32-byte Ed25519 seed, the signature over ``{id}.{timestamp}.{body}``. The public key is
# derived here with ``cryptography``, as a producer would (docs/http-api.md, "Signature
# schemes").
SW_V1A_SEED = "VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
SW_V1A_SIGNATURE = (
    "v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFi"
    "L8Ag=="
)
# A second producer's published vector (a Java consumer library's), whose public key is
# written as a DER SubjectPublicKeyInfo after ``whpk_``: the raw key is its last 32 bytes.
JAVA_SPKI_KEY = "whpk_MCowBQYDK2VwAyEAkp3dScDPIzT1CwUFUMdzyPbWOAQaCF9z4ucuKuZD7Io="
JAVA_ID = "7a2486b3-31cf-4bd3-a460-df8845d16cd5"
JAVA_TIMESTAMP = 1737987215
JAVA_BODY = b'{"greetings": "Hello World"}'
JAVA_VALID = (
    "v1a,XVbiOe+IzCKsXBuhb52iHLroqxFJofJNMQRL80I2kWO0+kXu2gcqgXAzontxDDgpMDw6SMh4sjzr+67EmU"
    "UzDg=="
)
JAVA_INVALID = (
    "v1a,J/b6YbswScYdpR1AvAXOM2HR/jdSzawexEQ+N/6dHBcKtvJFd9yivsCDkwVE6A1G2C9wFFwQENUhio5rNr"
    "piAw=="
)


def v1a_public_key(seed_b64: str) -> str:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(seed_b64))
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return "whpk_" + base64.b64encode(raw).decode()


def test_standard_webhooks_verifies_the_published_v1a_vector():
    verified = scheme_get("standard-webhooks").verify(
        raw_body=SW_BODY,
        headers=sw_headers(SW_V1A_SIGNATURE),
        secrets=[v1a_public_key(SW_V1A_SEED)],
    )
    assert (verified.event_id, verified.timestamp) == (SW_ID, str(SW_TIMESTAMP))
    assert verified.event_id_signed


def test_standard_webhooks_signs_the_published_v1a_vector_with_a_whsk_key():
    ours = signature_headers(
        scheme="standard-webhooks",
        secret="whsk_" + SW_V1A_SEED,
        raw_body=SW_BODY,
        event_id=SW_ID,
        timestamp=SW_TIMESTAMP,
    )
    assert ours["webhook-signature"] == SW_V1A_SIGNATURE


def test_a_second_producers_v1a_vector_verifies_with_its_raw_key():
    from webhooks.schemes import public_key_parse

    raw = base64.b64decode(JAVA_SPKI_KEY.removeprefix("whpk_"))[-32:]
    key = public_key_parse("whpk_" + base64.b64encode(raw).decode())
    headers = {
        "webhook-id": JAVA_ID,
        "webhook-timestamp": str(JAVA_TIMESTAMP),
        "webhook-signature": JAVA_VALID,
    }
    scheme = scheme_get("standard-webhooks")
    scheme.verify(raw_body=JAVA_BODY, headers=headers, secrets=[key])
    for body, signature in (
        (JAVA_BODY, JAVA_INVALID),
        (b'{"greetings": "Hello"}', JAVA_VALID),
    ):
        with pytest.raises(InvalidSignature) as excinfo:
            scheme.verify(
                raw_body=body,
                headers={**headers, "webhook-signature": signature},
                secrets=[key],
            )
        assert excinfo.value.reason == "mismatch"


def test_a_public_key_written_as_der_is_refused_with_how_to_read_it():
    from core.errors import InvalidPayload
    from webhooks.schemes import public_key_parse

    with pytest.raises(InvalidPayload) as excinfo:
        public_key_parse(JAVA_SPKI_KEY)
    message = str(excinfo.value)
    assert "32 bytes" in message and "44" in message
    assert "SubjectPublicKeyInfo" in message and "last 32 bytes" in message


@pytest.mark.parametrize(
    ("credentials", "signature", "reason"),
    [
        # A secret source skips v1a entries (unknown to it), as before.
        (["secret"], SW_V1A_SIGNATURE, "malformed"),
        # A public-key source skips v1 entries.
        (["public"], SW_SIGNATURE, "malformed"),
        (["public"], f"v1,{SW_SIGNATURE[3:]} v2,x", "malformed"),
        (["public"], "v1a," + base64.b64encode(b"\0" * 64).decode(), "mismatch"),
        (["public"], "v1a," + base64.b64encode(b"\0" * 32).decode(), "malformed"),
        # A source with no valid credential checks v1, as it always did.
        ([], SW_SIGNATURE, "mismatch"),
    ],
)
def test_the_versions_a_source_checks_follow_its_keys(credentials, signature, reason):
    keys = {"secret": SW_SECRET, "public": v1a_public_key(SW_V1A_SEED)}
    with pytest.raises(InvalidSignature) as excinfo:
        scheme_get("standard-webhooks").verify(
            raw_body=b"{}",
            headers=sw_headers(signature),
            secrets=[keys[c] for c in credentials],
        )
    assert excinfo.value.reason == reason


def test_at_most_a_few_v1a_entries_of_one_header_are_checked():
    """Each Ed25519 check costs a fraction of a millisecond, so an unsigned header full of
    entries must not buy an attacker tens of them: the first ``V1A_MAX_ENTRIES`` count."""
    from webhooks.schemes import V1A_MAX_ENTRIES

    key = v1a_public_key(SW_V1A_SEED)
    filler = ["v1a," + base64.b64encode(bytes([n]) * 64).decode() for n in range(20)]
    scheme = scheme_get("standard-webhooks")
    within = " ".join([*filler[: V1A_MAX_ENTRIES - 1], SW_V1A_SIGNATURE])
    scheme.verify(raw_body=SW_BODY, headers=sw_headers(within), secrets=[key])
    beyond = " ".join([*filler[:V1A_MAX_ENTRIES], SW_V1A_SIGNATURE])
    with pytest.raises(InvalidSignature) as excinfo:
        scheme.verify(raw_body=SW_BODY, headers=sw_headers(beyond), secrets=[key])
    assert excinfo.value.reason == "mismatch"


@pytest.mark.parametrize("scheme", ["hmac-sha256", "standard-webhooks", "github"])
def test_verify_names_the_secret_that_matched_during_a_rotation(scheme):
    """During a rotation's grace period a source holds its previous and its current secret:
    ``Verified`` names the one that verified the delivery (by its fingerprint), whichever
    the producer signed with and in whatever order the source holds them, so that ingest
    needs no second pass to learn it. A header valid under both names the first held."""
    from webhooks.schemes import secret_fingerprint

    implementation = scheme_get(scheme)
    previous, current = (implementation.secret_generate() for _ in range(2))
    now = int(datetime.now(UTC).timestamp())
    signed = {
        secret: signature_headers(
            scheme=scheme,
            secret=secret,
            raw_body=GH_BODY,
            event_id="evt_rotation",
            timestamp=now,
        )
        for secret in (previous, current)
    }
    for held in ([previous, current], [current, previous]):
        for signer, headers in signed.items():
            verified = implementation.verify(
                raw_body=GH_BODY, headers=headers, secrets=held
            )
            assert verified.secret_fingerprint == secret_fingerprint(signer)
        name = implementation.signature_header
        both = {
            **signed[previous],
            name: f"{signed[previous][name]} {signed[current][name]}",
        }
        verified = implementation.verify(raw_body=GH_BODY, headers=both, secrets=held)
        assert verified.secret_fingerprint == secret_fingerprint(held[0])


def test_verify_names_the_public_key_that_matched_beside_a_secret():
    from webhooks.schemes import key_pair_generate, secret_fingerprint

    scheme = scheme_get("standard-webhooks")
    old_private, old_public = key_pair_generate()
    _, new_public = key_pair_generate()
    headers = signature_headers(
        scheme="standard-webhooks",
        secret=old_private,
        raw_body=SW_BODY,
        event_id=SW_ID,
        timestamp=SW_TIMESTAMP,
    )
    verified = scheme.verify(
        raw_body=SW_BODY, headers=headers, secrets=[new_public, old_public]
    )
    assert verified.secret_fingerprint == secret_fingerprint(old_public)
