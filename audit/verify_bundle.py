"""Checks an evidence bundle offline, with nothing but the log's public key:

    python -m audit.verify_bundle bundle.json --key 'NAME+KEYID+KEY'

(docs/security.md, "Verifying an evidence bundle"). No database, no Django, no settings: this
module and what it imports (``audit.merkle``, ``audit.note``, ``audit.leaves``) need only the
standard library and ``cryptography``, so an auditor runs it on a machine of their own.

A bundle is one JSON object::

    {"checkpoint": "<signed note>", "public_key": "<verifier key>",
     "entries": [{"index": I, "leaf": "<canonical JSON>", "proof": ["<base64>", ...]}],
     "bodies": {"<SHA-256 hex of the body>": "<base64 of the raw body>"}}

What is checked, each failure named: the checkpoint's signature by the key given (not by the
key the bundle names: that one must merely agree), every entry's leaf (canonical JSON with a
kind and an id) and its inclusion proof against the checkpoint's root and size, every body
against the hash it is filed under, and what the checks registered for an entry's kind
(``LEAF_CHECKS``) say. Exits 0 when everything holds, 1 otherwise."""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit import leaves, merkle, note

_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass
class BundleReport:
    """What held (``checked``) and what failed (``failures``), each a sentence."""

    checked: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    checkpoint: note.Checkpoint | None = None

    @property
    def ok(self) -> bool:
        return not self.failures and self.checkpoint is not None


# A check for the leaves of one kind: given the decoded leaf and the bundle's bodies (hash ->
# raw bytes, already checked against their hash), the problems it finds, as sentences.
LeafCheck = Callable[[Mapping[str, Any], Mapping[str, bytes]], list[str]]


def body_field_check(name: str, *, required: bool = False) -> LeafCheck:
    """A check for leaves that name a body by its SHA-256 in field ``name``: the field is a
    hash, and the body is in the bundle (when ``required``: a kind whose bodies may be
    purged passes ``required=False`` and lets a purge's own entry account for it)."""

    def check(leaf: Mapping[str, Any], bodies: Mapping[str, bytes]) -> list[str]:
        value = leaf.get(name)
        if value is None and not required:
            return []
        if not isinstance(value, str) or not _HEX_SHA256.fullmatch(value):
            return [f"its {name} is not a SHA-256 in hex"]
        if required and value not in bodies:
            return [f"the body its {name} names is not in the bundle"]
        return []

    return check


# Kind -> the checks of its leaves' content. One line per kind of record logged.
LEAF_CHECKS: dict[str, list[LeafCheck]] = {}


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a base64 string")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError(f"{what} is not standard base64") from None


def _checkpoint_check(
    report: BundleReport, bundle: Mapping[str, Any], verifier: note.Verifier
) -> None:
    named = bundle.get("public_key")
    if named is not None and (
        not isinstance(named, str) or named.strip() != verifier.vkey
    ):
        report.failures.append(
            "public_key: the bundle names another key than the one given (--key)"
        )
    text = bundle.get("checkpoint")
    if not isinstance(text, str):
        report.failures.append("checkpoint: missing, or not a string")
        return
    try:
        checkpoint = note.checkpoint_parse(note.note_open(note=text, verifier=verifier))
    except note.NoteError as exc:
        report.failures.append(f"checkpoint: {exc}")
        return
    report.checkpoint = checkpoint
    report.checked.append(
        f"checkpoint: {checkpoint.origin}, tree size {checkpoint.size}, signed by "
        f"{verifier.name}+{verifier.key_id:08x}"
    )
    if checkpoint.origin != verifier.name:
        report.failures.append(
            f"checkpoint: its origin {checkpoint.origin!r} is not the key's name"
        )


def _bodies_check(report: BundleReport, bundle: Mapping[str, Any]) -> dict[str, bytes]:
    bodies = bundle.get("bodies", {})
    if not isinstance(bodies, dict):
        report.failures.append("bodies: not an object")
        return {}
    good: dict[str, bytes] = {}
    for key, value in bodies.items():
        try:
            raw = _b64(value, "the body")
        except ValueError as exc:
            report.failures.append(f"body {key}: {exc}")
            continue
        if hashlib.sha256(raw).hexdigest() != key:
            report.failures.append(
                f"body {key}: its SHA-256 is {hashlib.sha256(raw).hexdigest()}, not the "
                "hash it is filed under"
            )
            continue
        good[key] = raw
    if good:
        report.checked.append(f"bodies: {len(good)} match their SHA-256")
    return good


def _entry_check(
    report: BundleReport,
    position: int,
    entry: Any,
    checkpoint: note.Checkpoint,
    bodies: Mapping[str, bytes],
) -> None:
    name = f"entry {position}"
    if not isinstance(entry, dict):
        report.failures.append(f"{name}: not an object")
        return
    index, text, proof = entry.get("index"), entry.get("leaf"), entry.get("proof")
    if type(index) is not int:
        report.failures.append(f"{name}: its index is not an integer")
        return
    name = f"entry {position} (index {index})"
    if not isinstance(text, str):
        report.failures.append(f"{name}: its leaf is not a string")
        return
    try:
        leaf = leaves.leaf_decode(text)
    except leaves.LeafError as exc:
        report.failures.append(f"{name}: {exc}")
        return
    name = f"entry {position} (index {index}, {leaf['kind']} {leaf['id']})"
    if not isinstance(proof, list):
        report.failures.append(f"{name}: its proof is not a list")
        return
    try:
        hashes = [_b64(p, f"proof element {i}") for i, p in enumerate(proof)]
        merkle.inclusion_verify(
            index=index,
            size=checkpoint.size,
            leaf_hash=merkle.leaf_hash(text.encode()),
            proof=hashes,
            root=checkpoint.root,
        )
    except (ValueError, merkle.ProofError) as exc:
        report.failures.append(f"{name}: {exc} (tree size {checkpoint.size})")
        return
    problems = [
        problem
        for check in LEAF_CHECKS.get(leaf["kind"], ())
        for problem in check(leaf, bodies)
    ]
    if problems:
        report.failures.append(f"{name}: " + "; ".join(problems))
        return
    report.checked.append(f"{name}: in the log at size {checkpoint.size}")


def bundle_verify(bundle: Any, *, vkey: str) -> BundleReport:
    """Checks a decoded bundle against the verifier key ``vkey``."""
    report = BundleReport()
    try:
        verifier = note.verifier_parse(vkey)
    except note.NoteError as exc:
        report.failures.append(f"key: {exc}")
        return report
    if not isinstance(bundle, dict):
        report.failures.append("bundle: not a JSON object")
        return report
    _checkpoint_check(report, bundle, verifier)
    bodies = _bodies_check(report, bundle)
    entries = bundle.get("entries")
    if not isinstance(entries, list):
        report.failures.append("entries: missing, or not a list")
    elif report.checkpoint is not None:
        for position, entry in enumerate(entries):
            _entry_check(report, position, entry, report.checkpoint, bodies)
    return report


def _key_read(value: str) -> str:
    """The key itself, or the first line of a file that holds it."""
    path = Path(value)
    if "+" not in value and path.is_file():
        return path.read_text(encoding="utf-8").strip()
    return value.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m audit.verify_bundle",
        description="Verify an evidence bundle of the audit log offline.",
    )
    parser.add_argument("file", help="the bundle (JSON); - reads standard input")
    parser.add_argument(
        "--key",
        required=True,
        help="the log's verifier key NAME+KEYID+KEY (GET /audit/public-key), or a file "
        "holding it",
    )
    args = parser.parse_args(argv)
    try:
        raw = (
            sys.stdin.buffer.read()
            if args.file == "-"
            else Path(args.file).read_bytes()
        )
        bundle = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        print(f"FAIL bundle: cannot be read as UTF-8 JSON ({exc})", file=sys.stderr)
        return 1
    report = bundle_verify(bundle, vkey=_key_read(args.key))
    for line in report.checked:
        print(f"OK   {line}")
    for line in report.failures:
        print(f"FAIL {line}", file=sys.stderr)
    if report.ok:
        count = len(bundle.get("entries", []))
        print(f"bundle OK: {count} {'entry' if count == 1 else 'entries'} verified")
        return 0
    print(f"bundle FAILED: {len(report.failures)} problems", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
