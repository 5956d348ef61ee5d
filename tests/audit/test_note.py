"""Signed notes and checkpoints (audit/note.py), byte for byte against notes signed by Go's
``golang.org/x/mod/sumdb/note`` and the C2SP signed-note example
(``tests/audit/data/note_vectors.json`` names where each comes from)."""

import base64
import json
import re
from pathlib import Path

import pytest

from audit import note
from audit.merkle import EMPTY_ROOT

VECTORS = json.loads((Path(__file__).parent / "data" / "note_vectors.json").read_text())
GO = VECTORS["go"]


def test_a_go_signer_key_gives_go_s_verifier_key_and_signs_go_s_note_byte_for_byte():
    signer = note.signer_parse(GO["skey"])
    assert signer.verifier.vkey == GO["vkey"]
    assert note.note_sign(text=GO["text"], signer=signer) == GO["note"]


def test_notes_signed_by_go_and_by_the_c2sp_example_verify():
    verifier = note.verifier_parse(GO["vkey"])
    assert note.note_open(note=GO["note"], verifier=verifier) == GO["text"]
    c2sp = VECTORS["c2sp"]
    text = note.note_open(note=c2sp["note"], verifier=note.verifier_parse(c2sp["vkey"]))
    assert text == "This is an example message.\n"


def test_a_signature_by_another_key_is_ignored_and_one_by_no_known_key_fails():
    cosigned = GO["note"] + GO["other_signature_line"]
    assert note.note_open(note=cosigned, verifier=note.verifier_parse(GO["vkey"]))
    assert (
        note.note_open(note=cosigned, verifier=note.verifier_parse(GO["other_vkey"]))
        == GO["text"]
    )
    c2sp = note.verifier_parse(VECTORS["c2sp"]["vkey"])
    with pytest.raises(
        note.NoteError, match=re.escape("no signature of example.com/foo")
    ):
        note.note_open(note=GO["note"], verifier=c2sp)


def test_any_changed_byte_of_a_signed_note_fails():
    verifier = note.verifier_parse(GO["vkey"])
    raw = GO["note"].encode()
    failures = 0
    for position in range(len(raw)):
        changed = bytearray(raw)
        changed[position] ^= 0x01
        try:
            text = changed.decode()
        except UnicodeDecodeError:
            failures += 1  # not a note at all: a reader refuses it before parsing
            continue
        with pytest.raises(note.NoteError):
            note.note_open(note=text, verifier=verifier)
        failures += 1
    assert failures == len(raw)


@pytest.mark.parametrize(
    "vkey",
    [
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # id
        "PeterNeuman+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # name
        "PeterNeumann+c74f20a3+AhpC2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # algorithm
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10",  # length
        "PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # hex case
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # space
        "PeterNeumann+c74f20a3",
        "",
    ],
)
def test_malformed_or_inconsistent_verifier_keys_are_refused(vkey):
    with pytest.raises(note.NoteError):
        note.verifier_parse(vkey)


def test_malformed_signer_keys_are_refused_without_quoting_them():
    skey = GO["skey"]
    for bad in (
        skey.replace("PRIVATE", "PUBLIC"),
        skey[:-4],
        skey.replace("c74f", "c74e"),
    ):
        with pytest.raises(note.NoteError) as info:
            note.signer_parse(bad)
        assert skey.rsplit("+", 1)[1][:8] not in str(info.value)
    assert "AYEK" not in repr(note.signer_parse(skey))


def test_a_generated_key_pair_signs_and_verifies():
    skey, vkey = note.key_generate("example.org/log")
    signer = note.signer_parse(skey)
    assert signer.verifier.vkey == vkey
    text = "hello\n"
    assert (
        note.note_open(
            note=note.note_sign(text=text, signer=signer),
            verifier=note.verifier_parse(vkey),
        )
        == text
    )


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        ("text\n\u2014 a AAAA\n", "no blank line"),
        ("text\n\n\u2014 a AAAAAAAA", "final newline"),
        ("text\n\n- a AAAAAAAA\n", "em dash"),
        ("text\n\n\u2014 a+b AAAAAAAA\n", "not '— <name> <base64>'"),
        ("text\n\n\u2014 a not*base64\n", "base64"),
        ("text\n\n\u2014 a AAAA\n", "too short"),
        ("te\txt\n\n\u2014 a AAAAAAAA\n", "control character"),
    ],
)
def test_malformed_notes_are_refused_with_the_reason(broken, why):
    with pytest.raises(note.NoteError, match=why):
        note.note_split(broken)


def test_a_checkpoint_is_origin_size_and_base64_root_each_on_its_line():
    text = note.checkpoint_text(origin="example.com/log", size=0, root=EMPTY_ROOT)
    assert text == (
        "example.com/log\n0\n" + base64.b64encode(EMPTY_ROOT).decode() + "\n"
    )
    assert note.checkpoint_parse(text) == note.Checkpoint(
        origin="example.com/log", size=0, root=EMPTY_ROOT
    )
    # The C2SP tlog-checkpoint example, as its note text.
    example = (
        "example.com/behind-the-sofa\n20852163\n"
        "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    )
    parsed = note.checkpoint_parse(example)
    assert (parsed.origin, parsed.size) == ("example.com/behind-the-sofa", 20852163)


@pytest.mark.parametrize(
    "text",
    [
        "origin\n012\nAAAA\n",
        "origin\n-1\n" + base64.b64encode(EMPTY_ROOT).decode() + "\n",
        "origin\n12\n" + base64.b64encode(b"short").decode() + "\n",
        "origin\n12\n",
        "origin\n\n12\n" + base64.b64encode(EMPTY_ROOT).decode() + "\n",
        "origin\n12\n" + base64.b64encode(EMPTY_ROOT).decode(),
    ],
)
def test_malformed_checkpoints_are_refused(text):
    with pytest.raises(note.NoteError):
        note.checkpoint_parse(text)
