"""The offline bundle verifier (audit/verify_bundle.py): a bundle the log made verifies with
the public key alone; one changed byte in a leaf, a proof, the note or a body fails, and the
failure names what."""

import base64
import hashlib
import json
import os
import subprocess
import sys

import pytest

from audit import verify_bundle
from audit.bundles import bundle_build
from audit.checkpoints import checkpoint_make, log_verifier_key
from audit.errors import InvalidRange
from audit.leaves import LeafInput
from audit.log import log_append
from audit.note import key_generate
from tests.processes import ROOT

pytestmark = pytest.mark.django_db

BODIES = [b'{"event_id": "evt-1", "data": {"title": "caf\xc3\xa9"}}', b"second body"]


@pytest.fixture
def bundle():
    log_append(leaves=[LeafInput(kind="sample_record", record_id=i) for i in range(11)])
    log_append(
        leaves=[
            LeafInput(
                kind="sample_message",
                record_id=i,
                fields={"payload_hash": hashlib.sha256(body).hexdigest()},
            )
            for i, body in enumerate(BODIES)
        ]
    )
    log_append(leaves=[LeafInput(kind="sample_record", record_id=100)])
    checkpoint_make()
    return bundle_build(indexes=[11, 3, 12, 13], bodies=BODIES)


def failures(bundle, key=None) -> list[str]:
    return verify_bundle.bundle_verify(bundle, vkey=key or log_verifier_key()).failures


def flipped(text: str, position: int) -> str:
    raw = bytearray(text.encode())
    raw[position] ^= 0x01
    return raw.decode()


def test_a_bundle_the_log_made_verifies_with_the_public_key_alone(bundle):
    report = verify_bundle.bundle_verify(bundle, vkey=log_verifier_key())
    assert report.ok, report.failures
    assert report.checkpoint.size == 14
    assert [e["index"] for e in bundle["entries"]] == [3, 11, 12, 13]
    assert any("bodies: 2 match" in line for line in report.checked)


def test_the_command_line_says_ok_and_exits_zero(bundle, tmp_path, capsys):
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle))
    assert verify_bundle.main([str(path), "--key", log_verifier_key()]) == 0
    out = capsys.readouterr().out
    assert "bundle OK: 4 entries verified" in out
    assert "OK   entry 1 (index 11, sample_message 0): in the log at size 14" in out
    key_file = tmp_path / "key.txt"
    key_file.write_text(log_verifier_key() + "\n")
    assert verify_bundle.main([str(path), "--key", str(key_file)]) == 0


def test_one_changed_byte_of_a_leaf_fails_and_names_the_entry(bundle):
    entry = bundle["entries"][1]
    text = entry["leaf"]
    for position in range(len(text.encode())):
        entry["leaf"] = flipped(text, position)
        problems = failures(bundle)
        assert problems and all(p.startswith("entry 1 (index 11") for p in problems), (
            position,
            problems,
        )


def test_one_changed_byte_of_a_proof_fails_and_names_the_entry(bundle):
    entry = bundle["entries"][2]
    original = list(entry["proof"])
    for element, value in enumerate(original):
        raw = base64.b64decode(value)
        for position in range(len(raw)):
            changed = bytearray(raw)
            changed[position] ^= 0x80
            entry["proof"] = list(original)
            entry["proof"][element] = base64.b64encode(changed).decode()
            problems = failures(bundle)
            assert len(problems) == 1
            assert problems[0].startswith("entry 2 (index 12, sample_message 1):")
            assert "does not lead to the root" in problems[0]
    entry["proof"] = original[:-1]
    assert "shorter" in failures(bundle)[0]


def test_one_changed_byte_of_the_note_fails_and_names_the_checkpoint(bundle):
    note = bundle["checkpoint"]
    for position in range(len(note.encode())):
        try:
            bundle["checkpoint"] = flipped(note, position)
        except UnicodeDecodeError:
            continue  # not text at all: json.loads refuses such a file before this
        problems = failures(bundle)
        assert problems and problems[0].startswith("checkpoint:"), (position, problems)


def test_one_changed_byte_of_a_body_fails_and_names_the_body(bundle):
    digest = hashlib.sha256(BODIES[0]).hexdigest()
    for position in range(len(BODIES[0])):
        changed = bytearray(BODIES[0])
        changed[position] ^= 0x01
        bundle["bodies"][digest] = base64.b64encode(changed).decode()
        problems = failures(bundle)
        assert problems == [
            f"body {digest}: its SHA-256 is {hashlib.sha256(changed).hexdigest()}, not "
            "the hash it is filed under"
        ]


def test_another_key_fails_even_when_the_bundle_names_it(bundle):
    _, other = key_generate("impostor.example/log")
    problems = failures(bundle, key=other)
    assert "public_key: the bundle names another key than the one given (--key)" in (
        problems
    )
    assert any(
        p.startswith("checkpoint: the note carries no signature of") for p in problems
    )
    bundle["public_key"] = other
    assert failures(bundle, key=other)[0].startswith("checkpoint:")


def test_checks_by_kind_plug_in(bundle, monkeypatch):
    monkeypatch.setitem(
        verify_bundle.LEAF_CHECKS,
        "sample_message",
        [verify_bundle.body_field_check("payload_hash", required=True)],
    )
    assert failures(bundle) == []
    del bundle["bodies"][hashlib.sha256(BODIES[1]).hexdigest()]
    assert failures(bundle) == [
        "entry 2 (index 12, sample_message 1): the body its payload_hash names is not "
        "in the bundle"
    ]


def test_an_entry_the_checkpoint_does_not_cover_is_not_bundled(bundle):
    log_append(leaves=[LeafInput(kind="sample_record", record_id=200)])
    with pytest.raises(InvalidRange):
        bundle_build(indexes=[14])


def test_malformed_bundles_fail_with_the_reason(bundle, tmp_path, capsys):
    path = tmp_path / "bundle.json"
    path.write_bytes(b"\xff not json")
    assert verify_bundle.main([str(path), "--key", log_verifier_key()]) == 1
    assert "FAIL bundle: cannot be read as UTF-8 JSON" in capsys.readouterr().err
    for broken, why in [
        ([], "bundle: not a JSON object"),
        ({**bundle, "entries": "x"}, "entries: missing, or not a list"),
        ({**bundle, "checkpoint": 3}, "checkpoint: missing, or not a string"),
        (
            {**bundle, "entries": [{"index": "1"}]},
            "entry 0: its index is not an integer",
        ),
    ]:
        assert why in failures(broken)
    assert failures(bundle, key="nonsense") == [
        "key: a verifier key is <name>+<hex key id>+<base64 key>"
    ]


@pytest.mark.slow
def test_the_verifier_runs_as_python_m_without_django_and_names_a_failure(
    bundle, tmp_path
):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(bundle))
    bundle["entries"][0]["leaf"] = bundle["entries"][0]["leaf"].replace(":3", ":4")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(bundle))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}  # no Django settings
    key = log_verifier_key()
    ok = subprocess.run(
        [sys.executable, "-m", "audit.verify_bundle", str(good), "--key", key],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "bundle OK: 4 entries verified" in ok.stdout
    failed = subprocess.run(
        [sys.executable, "-m", "audit.verify_bundle", str(bad), "--key", key],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert failed.returncode == 1
    assert "FAIL entry 0 (index 3, sample_record 4)" in failed.stderr
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, audit.verify_bundle; "
            "print(sorted({m.split('.')[0] for m in sys.modules}))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modules = set(json.loads(imported.stdout.replace("'", '"')))
    assert not modules & {"django", "psycopg", "celery", "rest_framework", "httpx"}
    assert "cryptography" in modules
