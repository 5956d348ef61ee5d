"""The operator commands of a source whose producer signs with Ed25519 (Standard Webhooks
``v1a``): ``webhook_source create/rotate/list`` with ``--public-key``, the keys they refuse,
``webhook_keygen`` and ``send_test_webhook --private-key-file``. Keys are made here with
``cryptography`` unless the command under test makes them."""

from __future__ import annotations

import base64
import io
import json
import os
import pwd
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.core.management import CommandError, call_command

from trail.models import OperatorAction
from webhooks.models import InboxEvent, WebhookSecret, WebhookSource
from webhooks.schemes import secret_fingerprint

pytestmark = pytest.mark.django_db


def run(*args) -> list[str]:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


def raw_public(private_key: Ed25519PrivateKey) -> bytes:
    return private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def whpk(raw: bytes) -> str:
    return "whpk_" + base64.b64encode(raw).decode()


def create(slug: str, *extra: str) -> list[str]:
    return run(
        "webhook_source",
        "create",
        slug,
        "--scheme",
        "standard-webhooks",
        "--handler",
        "research",
        *extra,
    )


def test_create_with_a_public_key_holds_it_and_no_secret():
    key = whpk(raw_public(Ed25519PrivateKey.generate()))
    lines = create("ed", "--public-key", key)
    source = WebhookSource.objects.get(slug="ed")
    (stored,) = WebhookSecret.objects.filter(source=source)
    assert (stored.kind, stored.secret) == ("public_key", key)
    assert stored.fingerprint == secret_fingerprint(key)
    # Nothing generated, nothing to store: the output names the key by its fingerprint.
    assert not any(line.startswith("whsec_") for line in lines)
    assert stored.fingerprint in lines[-1]
    action = OperatorAction.objects.get(action="create_source")
    assert action.details["public_key"] == key
    assert action.details["fingerprint"] == stored.fingerprint


def test_a_public_key_is_stored_in_its_one_canonical_spelling():
    raw = raw_public(Ed25519PrivateKey.generate())
    create("ed", "--public-key", "  " + whpk(raw) + "\n")
    assert WebhookSecret.objects.get().secret == whpk(raw)


def refused_keys() -> list[tuple[str, str]]:
    raw = raw_public(Ed25519PrivateKey.generate())
    seed = base64.b64encode(os.urandom(32)).decode()
    spki = bytes.fromhex("302a300506032b6570032100") + raw
    return [
        ("31 bytes", whpk(raw[:31])),
        ("33 bytes", whpk(raw + b"\x00")),
        ("not base64", "whpk_" + "%" * 44),
        ("no padding", whpk(raw).rstrip("=")),
        ("URL-safe base64", "whpk_" + base64.urlsafe_b64encode(b"\xfb" * 32).decode()),
        ("another prefix", "whsec_" + base64.b64encode(raw).decode()),
        ("no prefix", base64.b64encode(raw).decode()),
        ("a private key", "whsk_" + seed),
        ("a DER public key", whpk(spki)),
        ("empty", "whpk_"),
    ]


@pytest.mark.parametrize(
    ("what", "key"), refused_keys(), ids=[w for w, _ in refused_keys()]
)
def test_create_refuses_anything_but_a_32_byte_public_key(what, key):
    with pytest.raises(CommandError) as excinfo:
        create("ed", "--public-key", key)
    message = str(excinfo.value)
    assert "whpk_" in message
    if what == "a private key":
        assert "private" in message and key not in message
    if what in ("31 bytes", "33 bytes"):
        assert "32 bytes" in message
    assert not WebhookSource.objects.exists()
    assert not OperatorAction.objects.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--scheme", "hmac-sha256"],
        ["--scheme", "github"],
        ["--scheme", "standard-webhooks", "--secret", "whsec_" + "A" * 40],
    ],
    ids=["hmac-sha256", "github", "with a secret"],
)
def test_a_public_key_goes_with_standard_webhooks_alone_and_no_secret(args):
    key = whpk(raw_public(Ed25519PrivateKey.generate()))
    with pytest.raises(CommandError):
        run(
            "webhook_source",
            "create",
            "ed",
            "--handler",
            "research",
            "--public-key",
            key,
            *args,
        )
    assert not WebhookSource.objects.exists()


def test_a_private_key_is_never_taken_as_a_secret_either():
    seed = "whsk_" + base64.b64encode(os.urandom(32)).decode()
    for scheme in ("hmac-sha256", "standard-webhooks", "github"):
        with pytest.raises(CommandError, match="private"):
            run(
                "webhook_source",
                "create",
                "lab",
                "--scheme",
                scheme,
                "--handler",
                "research",
                "--secret",
                seed,
            )
    assert not WebhookSecret.objects.exists()


def test_rotate_to_a_new_public_key_keeps_the_old_one_for_the_grace_period(
    monkeypatch,
):
    monkeypatch.setenv("USER", "mallory")
    oncall = f"os:{pwd.getpwuid(os.getuid()).pw_name}"
    old = whpk(raw_public(Ed25519PrivateKey.generate()))
    new = whpk(raw_public(Ed25519PrivateKey.generate()))
    create("ed", "--public-key", old)
    lines = run(
        "webhook_source",
        "rotate",
        "ed",
        "--public-key",
        new,
        "--grace-seconds",
        "600",
        "--reason",
        "producer key change",
    )
    assert "600 s" in lines[0]
    assert secret_fingerprint(new) in lines[-1]
    old_row = WebhookSecret.objects.get(secret=old)
    remaining = (old_row.expires_at - datetime.now(tz=UTC)).total_seconds()
    assert 590 < remaining <= 600
    new_row = WebhookSecret.objects.get(secret=new)
    assert (new_row.kind, new_row.expires_at) == ("public_key", None)
    action = OperatorAction.objects.get(action="rotate_public_key")
    assert (action.actor_name, action.reason) == (oncall, "producer key change")
    assert action.details["public_key"] == new


@pytest.mark.parametrize(
    ("what", "key"), refused_keys(), ids=[w for w, _ in refused_keys()]
)
def test_rotate_refuses_anything_but_a_32_byte_public_key(what, key):
    old = whpk(raw_public(Ed25519PrivateKey.generate()))
    create("ed", "--public-key", old)
    with pytest.raises(CommandError):
        run("webhook_source", "rotate", "ed", "--public-key", key)
    assert list(WebhookSecret.objects.values_list("secret", "expires_at")) == [
        (old, None)
    ]
    assert not OperatorAction.objects.filter(action__startswith="rotate").exists()


def test_a_rotation_never_changes_what_a_source_holds():
    key = whpk(raw_public(Ed25519PrivateKey.generate()))
    create("ed", "--public-key", key)
    # Without --public-key a rotation would generate a secret: a public-key source would
    # then take v1 signatures again.
    for args in ([], ["--secret", "whsec_" + "B" * 40]):
        with pytest.raises(CommandError, match="--public-key"):
            run("webhook_source", "rotate", "ed", *args)
    create("sw")
    with pytest.raises(CommandError, match="create a source with --public-key"):
        run("webhook_source", "rotate", "sw", "--public-key", key)
    assert WebhookSecret.objects.filter(expires_at__isnull=False).count() == 0
    assert WebhookSecret.objects.count() == 2
    assert not OperatorAction.objects.filter(action__startswith="rotate").exists()


def test_list_shows_public_keys_and_never_a_secret():
    secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    create("sw", "--secret", secret)
    old = whpk(raw_public(Ed25519PrivateKey.generate()))
    new = whpk(raw_public(Ed25519PrivateKey.generate()))
    create("ed", "--public-key", old)
    run("webhook_source", "rotate", "ed", "--public-key", new, "--grace-seconds", "0")
    header, *rows = run("webhook_source", "list")
    assert header.split("\t") == [
        "slug",
        "scheme",
        "handler",
        "secrets",
        "enabled",
        "paused",
        "public keys",
    ]
    listed = {row.split("\t")[0]: row.split("\t") for row in rows}
    assert listed["sw"][1:] == ["standard-webhooks", "research", "1", "yes", "no", "-"]
    # The key that verifies now (the old one's grace is over), with its fingerprint.
    assert listed["ed"][1:6] == ["standard-webhooks", "research", "0", "yes", "no"]
    assert listed["ed"][6] == f"{new} ({secret_fingerprint(new)})"
    assert secret not in "\n".join(rows)


def test_keygen_prints_a_key_pair_with_the_private_key_once_as_the_last_line():
    lines = run("webhook_keygen")
    private = lines[-1]
    assert private.startswith("whsk_")
    assert sum(private in line for line in lines) == 1
    seed = base64.b64decode(private.removeprefix("whsk_"), validate=True)
    assert len(seed) == 32
    expected = whpk(raw_public(Ed25519PrivateKey.from_private_bytes(seed)))
    [public] = [line for line in lines if line.startswith("whpk_")]
    assert public == expected
    assert any(secret_fingerprint(public) in line for line in lines)
    # Each run a new pair.
    assert run("webhook_keygen")[-1] != private
    # The public key is what a source takes.
    create("ed", "--public-key", public)


@pytest.mark.django_db(transaction=True)
def test_send_test_webhook_signs_v1a_with_a_private_key_file(live_server, tmp_path):
    private_key = Ed25519PrivateKey.generate()
    seed = private_key.private_bytes_raw()
    key_file = tmp_path / "producer.whsk"
    key_file.write_text("whsk_" + base64.b64encode(seed).decode() + "\n")
    create("ed", "--public-key", whpk(raw_public(private_key)))
    lines = run(
        "send_test_webhook",
        "--url",
        live_server.url,
        "--source",
        "ed",
        "--private-key-file",
        str(key_file),
        "--event-id",
        "evt-v1a-1",
    )
    assert lines[0].endswith("-> 202"), lines
    assert json.loads(lines[1]) == {"status": "accepted", "event_id": "evt-v1a-1"}
    row = InboxEvent.objects.get()
    assert row.headers["webhook-signature"].startswith("v1a,")
    assert row.secret_fingerprint == WebhookSecret.objects.get().fingerprint
    # The signature the command sent verifies with the public key, checked here.
    assert not any(seed.hex() in line for line in lines)

    # Another producer's key is refused by the inbox.
    other = tmp_path / "other.whsk"
    other.write_text(
        "whsk_" + base64.b64encode(os.urandom(32)).decode() + "\n", encoding="utf-8"
    )
    again = run(
        "send_test_webhook",
        "--url",
        live_server.url,
        "--source",
        "ed",
        "--private-key-file",
        str(other),
    )
    assert again[0].endswith("-> 401")


@pytest.mark.parametrize(
    "content",
    [
        "whpk_" + base64.b64encode(b"k" * 32).decode(),  # a public key signs nothing
        "whsk_" + base64.b64encode(b"k" * 31).decode(),
        "whsk_%%%",
        "whsec_" + base64.b64encode(b"k" * 32).decode(),
    ],
    ids=["public key", "31 bytes", "not base64", "a secret"],
)
def test_send_test_webhook_refuses_a_file_that_holds_no_private_key(tmp_path, content):
    key_file = tmp_path / "key"
    key_file.write_text(content + "\n")
    with pytest.raises(CommandError, match="whsk_"):
        run(
            "send_test_webhook",
            "--url",
            "http://127.0.0.1:9",
            "--source",
            "ed",
            "--scheme",
            "standard-webhooks",
            "--handler",
            "research",
            "--private-key-file",
            str(key_file),
        )


def test_send_test_webhook_signs_with_a_private_key_for_standard_webhooks_only(
    tmp_path,
):
    key_file = tmp_path / "key"
    key_file.write_text("whsk_" + base64.b64encode(os.urandom(32)).decode())
    with pytest.raises(CommandError, match="standard-webhooks"):
        run(
            "send_test_webhook",
            "--url",
            "http://127.0.0.1:9",
            "--source",
            "elsewhere",
            "--scheme",
            "hmac-sha256",
            "--private-key-file",
            str(key_file),
        )


def test_a_v1a_signature_made_by_send_test_webhook_verifies_with_cryptography():
    """What the command signs is Standard Webhooks' v1a, as any verifier reads it."""
    from webhooks.schemes import signature_headers

    private_key = Ed25519PrivateKey.generate()
    whsk = "whsk_" + base64.b64encode(private_key.private_bytes_raw()).decode()
    headers = signature_headers(
        scheme="standard-webhooks",
        secret=whsk,
        raw_body=b'{"a": 1}',
        event_id="msg_1",
        timestamp=1700000000,
    )
    version, _, value = headers["webhook-signature"].partition(",")
    assert version == "v1a"
    public = Ed25519PublicKey.from_public_bytes(raw_public(private_key))
    public.verify(base64.b64decode(value), b'msg_1.1700000000.{"a": 1}')
