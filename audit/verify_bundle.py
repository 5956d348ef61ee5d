"""Checks an evidence bundle offline, with nothing but the log's public key:

    python -m audit.verify_bundle bundle.json --key 'NAME+KEYID+KEY'

(docs/security.md, "Evidence bundles"). No database, no Django, no settings: this
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
(``LEAF_CHECKS``) say: an inbox event's body and a mismatch's conflicting body are in the
bundle (or an entry says it was purged), a revision's event is the inbox event it names,
with the same event id, entity and content hash as that event's body... Records of the
story that the checkpoint does not cover yet are listed under ``"unproven"``: reported as
such (``UNPROVEN``), never counted as verified. A bounded story names what it left out
under ``"omitted"``: records of a kind past the bundle's limit (their kind, count, and the
lowest and highest of their ids and log indexes) and bodies past its byte bound (their
SHA-256 and size); reported as such (``OMITTED``), never counted as verified. A body named
there excuses its absence, and nothing else does. Exits 0 when everything given as proven
holds, 1 otherwise."""

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
    unproven: list[str] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)
    omitted_records: int = 0
    omitted_bodies: int = 0
    checkpoint: note.Checkpoint | None = None

    @property
    def ok(self) -> bool:
        return not self.failures and self.checkpoint is not None


@dataclass(frozen=True)
class BundleContext:
    """What an entry's checks may look at: the bundle's bodies (hash -> raw bytes, already
    checked against their hash), its entries whose proof holds, by (kind, id), and the
    hashes of the bodies it names as left out (``"omitted"``)."""

    bodies: Mapping[str, bytes]
    entries: Mapping[tuple[str, int], Mapping[str, Any]]
    omitted_bodies: frozenset[str] = frozenset()

    def entry(self, kind: str, record_id: Any) -> Mapping[str, Any] | None:
        if type(record_id) is not int:
            return None
        return self.entries.get((kind, record_id))


# A check for the leaves of one kind: given the decoded leaf and the bundle's context, the
# problems it finds, as sentences.
LeafCheck = Callable[[Mapping[str, Any], BundleContext], list[str]]


def body_field_check(
    name: str, *, required: bool = False, purge_kind: str | None = None
) -> LeafCheck:
    """A check for leaves that name a body by its SHA-256 in field ``name``: the field is a
    hash, and (when ``required``) the body is in the bundle, unless an entry of
    ``purge_kind`` with the same id says the body was purged, or the bundle names the body
    as left out for its size."""

    def check(leaf: Mapping[str, Any], context: BundleContext) -> list[str]:
        value = leaf.get(name)
        if value is None and not required:
            return []
        if not isinstance(value, str) or not _HEX_SHA256.fullmatch(value):
            return [f"its {name} is not a SHA-256 in hex"]
        if not required or value in context.bodies or value in context.omitted_bodies:
            return []
        if purge_kind is not None and context.entry(purge_kind, leaf["id"]):
            return []
        return [f"the body its {name} names is not in the bundle"]

    return check


def refers_check(field_name: str, kind: str, *, optional: bool = False) -> LeafCheck:
    """The record the leaf's ``field_name`` names (an id of ``kind``) is an entry of the
    bundle; with ``optional``, only when the field is set."""

    def check(leaf: Mapping[str, Any], context: BundleContext) -> list[str]:
        value = leaf.get(field_name)
        if value is None and optional:
            return []
        if context.entry(kind, value) is None:
            return [
                f"the {kind.replace('_', ' ')} {value} it names is not in the bundle"
            ]
        return []

    return check


def _body_json(context: BundleContext, event: Mapping[str, Any]) -> Any:
    body = context.bodies.get(str(event.get("payload_hash")))
    if body is None:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def revision_check(leaf: Mapping[str, Any], context: BundleContext) -> list[str]:
    """A document revision against the inbox event that made it: the same event id and
    entity, and (when the event's body is in the bundle) the content hash of its
    ``source``."""
    event = context.entry("inbox_event", leaf.get("inbox_event_id"))
    if event is None:
        return []  # refers_check names it
    problems = []
    if event.get("event_id") != leaf.get("event_id"):
        problems.append(
            f"its event id {leaf.get('event_id')!r} is not its inbox event's "
            f"({event.get('event_id')!r})"
        )
    if event.get("entity_id") != leaf.get("entity_id"):
        problems.append(
            f"its entity {leaf.get('entity_id')!r} is not its inbox event's "
            f"({event.get('entity_id')!r})"
        )
    body = _body_json(context, event)
    if isinstance(body, dict):
        source = body.get("source")
        carried = source.get("content_hash") if isinstance(source, dict) else None
        if (carried or "") != leaf.get("content_hash"):
            problems.append(
                f"its content hash {leaf.get('content_hash')!r} is not the one its "
                f"event's body carries ({carried!r})"
            )
    return problems


def purge_check_of(
    *, kind: str, action_name: str, ids_of: Callable[[Mapping[str, Any]], Any]
) -> LeafCheck:
    """A body's purge: of a record of ``kind`` in the bundle, and, when the purge's operator
    action is in the bundle too, an ``action_name`` action that names the record (through
    ``ids_of``) with the same stamp."""

    def check(leaf: Mapping[str, Any], context: BundleContext) -> list[str]:
        problems = refers_check("id", kind)(leaf, context)
        if not isinstance(leaf.get("purged_at"), str):
            problems.append("its purged_at is not a time")
        action = context.entry("operator_action", leaf.get("operator_action_id"))
        if action is not None:
            details = action.get("details")
            if (
                action.get("action") != action_name
                or not isinstance(details, dict)
                or not isinstance(ids_of(action), list)
                or leaf["id"] not in ids_of(action)
                or details.get("purged_at") != leaf.get("purged_at")
            ):
                problems.append(
                    f"operator action {leaf.get('operator_action_id')} of the bundle is "
                    "not this purge"
                )
        return problems

    return check


def _details(action: Mapping[str, Any]) -> Mapping[str, Any]:
    details = action.get("details")
    return details if isinstance(details, dict) else {}


# An inbox body's purge, and an evidence body's.
purge_check = purge_check_of(
    kind="inbox_event",
    action_name="purge_bodies",
    ids_of=lambda action: action.get("event_ids"),
)
evidence_purge_check = purge_check_of(
    kind="fingerprint_mismatch",
    action_name="purge_evidence_bodies",
    ids_of=lambda action: _details(action).get("mismatch_ids"),
)


def job_check(leaf: Mapping[str, Any], context: BundleContext) -> list[str]:
    """A transition or status sync names the deployment or build it moved, which is an entry
    of the bundle."""
    if leaf.get("deployment_id") is not None:
        return refers_check("deployment_id", "deployment")(leaf, context)
    return refers_check("build_id", "build")(leaf, context)


# What a trigger attempt may say it started (docs/http-api.md, "What a trigger started").
DOWNSTREAM_SYSTEMS = frozenset({"github", "github-actions", "http"})


def downstream_check(leaf: Mapping[str, Any], context: BundleContext) -> list[str]:
    """A trigger attempt's ``downstream``, when it has one, is what the product records:
    ``{"system", "id", "url"}``, a known system, an id that is text or an integer, a URL
    that is http(s) text, and at least one of the two."""
    if "downstream" not in leaf:
        return []
    value = leaf["downstream"]
    if not isinstance(value, dict) or set(value) != {"system", "id", "url"}:
        return ["its downstream is not an object of system, id and url"]
    problems = []
    if value["system"] not in DOWNSTREAM_SYSTEMS:
        problems.append(f"its downstream system {value['system']!r} is unknown")
    identifier, url = value["id"], value["url"]
    if identifier is not None and (
        isinstance(identifier, bool) or not isinstance(identifier, str | int)
    ):
        problems.append("its downstream id is neither text nor an integer")
    if url is not None and (
        not isinstance(url, str) or not url.startswith(("http://", "https://"))
    ):
        problems.append("its downstream url is not an http(s) URL")
    if identifier is None and url is None:
        problems.append("its downstream names neither an id nor a url")
    return problems


# Kind -> the checks of its leaves' content (audit/ledgers.py lists the kinds). A kind with
# none here is checked by its proof alone.
LEAF_CHECKS: dict[str, list[LeafCheck]] = {
    "inbox_event": [
        body_field_check("payload_hash", required=True, purge_kind="body_purge")
    ],
    "fingerprint_mismatch": [
        body_field_check(
            "conflicting_payload_hash", required=True, purge_kind="evidence_purge"
        ),
        refers_check("inbox_event_id", "inbox_event"),
    ],
    "inbox_attempt": [refers_check("inbox_event_id", "inbox_event")],
    "document_revision": [
        refers_check("inbox_event_id", "inbox_event"),
        revision_check,
    ],
    "body_purge": [purge_check],
    "evidence_purge": [evidence_purge_check],
    "job_transition": [job_check],
    "status_sync": [job_check],
    "trigger_attempt": [job_check, downstream_check],
}


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
) -> tuple[str, dict[str, Any]] | None:
    """An entry's leaf and inclusion proof; returns its name and decoded leaf when both
    hold."""
    name = f"entry {position}"
    if not isinstance(entry, dict):
        report.failures.append(f"{name}: not an object")
        return None
    index, text, proof = entry.get("index"), entry.get("leaf"), entry.get("proof")
    if type(index) is not int:
        report.failures.append(f"{name}: its index is not an integer")
        return None
    name = f"entry {position} (index {index})"
    if not isinstance(text, str):
        report.failures.append(f"{name}: its leaf is not a string")
        return None
    try:
        leaf = leaves.leaf_decode(text)
    except leaves.LeafError as exc:
        report.failures.append(f"{name}: {exc}")
        return None
    name = f"entry {position} (index {index}, {leaf['kind']} {leaf['id']})"
    if not isinstance(proof, list):
        report.failures.append(f"{name}: its proof is not a list")
        return None
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
        return None
    return name, leaf


def _contents_check(
    report: BundleReport,
    proved: list[tuple[str, dict[str, Any]]],
    bodies: Mapping[str, bytes],
    checkpoint: note.Checkpoint,
    omitted_bodies: frozenset[str],
) -> None:
    context = BundleContext(
        bodies=bodies,
        entries={(leaf["kind"], leaf["id"]): leaf for _, leaf in proved},
        omitted_bodies=omitted_bodies,
    )
    for name, leaf in proved:
        problems = [
            problem
            for check in LEAF_CHECKS.get(leaf["kind"], ())
            for problem in check(leaf, context)
        ]
        if problems:
            report.failures.append(f"{name}: " + "; ".join(problems))
        else:
            report.checked.append(
                f"{name}: in the log at size {checkpoint.size}{_told(leaf)}"
            )


def _told(leaf: Mapping[str, Any]) -> str:
    """What a proven entry says that an auditor follows further: the run or deployment a
    trigger attempt started (its system's id and link)."""
    downstream = leaf.get("downstream")
    if leaf.get("kind") != "trigger_attempt" or not isinstance(downstream, dict):
        return ""
    said = f"; it started {downstream['system']} {downstream['id']}"
    return f"{said} ({downstream['url']})" if downstream["url"] else said


def _unproven_report(report: BundleReport, bundle: Mapping[str, Any]) -> None:
    unproven = bundle.get("unproven", [])
    if not isinstance(unproven, list):
        report.failures.append("unproven: not a list")
        return
    for item in unproven:
        if not isinstance(item, dict):
            report.failures.append("unproven: an item is not an object")
            continue
        kind, record_id = item.get("kind"), item.get("id")
        reason = item.get("reason") or "not in the checkpoint"
        report.unproven.append(f"{kind} {record_id}: {reason}")


def _int_pair(value: Any) -> tuple[int, int] | None:
    """``[low, high]``, two integers with ``low <= high``; ``None`` otherwise."""
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(type(v) is int for v in value)
        and value[0] <= value[1]
    ):
        return value[0], value[1]
    return None


def _omitted_record(item: Any) -> str | None:
    """How the verifier reports one kind of records left out; ``None`` when the item is
    not one."""
    if not isinstance(item, dict):
        return None
    kind, count = item.get("kind"), item.get("count")
    if not isinstance(kind, str) or type(count) is not int or count < 1:
        return None
    ids, indexes = _int_pair(item.get("ids")), item.get("indexes")
    if ids is None or (indexes is not None and _int_pair(indexes) is None):
        return None
    records = "record" if count == 1 else "records"
    line = f"{kind}: {count} {records}, ids {ids[0]} to {ids[1]}"
    if indexes is None:
        return line + ", none in the log yet"
    return line + f", log indexes {indexes[0]} to {indexes[1]}"


def _omitted_check(report: BundleReport, bundle: Mapping[str, Any]) -> frozenset[str]:
    """Reads what the bundle says it left out: records past its limit of a kind, bodies
    past its byte bound. Returns the hashes of the bodies left out."""
    omitted = bundle.get("omitted", {})
    if not isinstance(omitted, dict):
        report.failures.append("omitted: not an object")
        return frozenset()
    records, bodies = omitted.get("records", []), omitted.get("bodies", [])
    if not isinstance(records, list) or not isinstance(bodies, list):
        report.failures.append("omitted: its records or bodies are not a list")
        return frozenset()
    for position, item in enumerate(records):
        line = _omitted_record(item)
        if line is None:
            report.failures.append(
                f"omitted: record item {position} is not a kind, a count, ids "
                "[low, high] and indexes [low, high] or null"
            )
            continue
        report.omitted.append(line)
        report.omitted_records += item["count"]
    hashes: set[str] = set()
    for position, item in enumerate(bodies):
        digest = item.get("hash") if isinstance(item, dict) else None
        size = item.get("bytes") if isinstance(item, dict) else None
        if (
            not isinstance(digest, str)
            or not _HEX_SHA256.fullmatch(digest)
            or type(size) is not int
            or size < 0
        ):
            report.failures.append(
                f"omitted: body item {position} is not a SHA-256 in hex and a size"
            )
            continue
        hashes.add(digest)
        report.omitted.append(f"body {digest} ({size} bytes)")
    report.omitted_bodies = len(hashes)
    return frozenset(hashes)


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
    omitted_bodies = _omitted_check(report, bundle)
    bodies = _bodies_check(report, bundle)
    entries = bundle.get("entries")
    if not isinstance(entries, list):
        report.failures.append("entries: missing, or not a list")
    elif report.checkpoint is not None:
        proved = [
            checked
            for position, entry in enumerate(entries)
            if (checked := _entry_check(report, position, entry, report.checkpoint))
        ]
        _contents_check(report, proved, bodies, report.checkpoint, omitted_bodies)
    _unproven_report(report, bundle)
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
    for line in report.unproven:
        print(f"UNPROVEN {line}")
    for line in report.omitted:
        print(f"OMITTED {line}")
    for line in report.failures:
        print(f"FAIL {line}", file=sys.stderr)
    if report.ok:
        count = len(bundle.get("entries", []))
        summary = f"bundle OK: {count} {'entry' if count == 1 else 'entries'} verified"
        if report.unproven:
            records = "record" if len(report.unproven) == 1 else "records"
            summary += (
                f"; {len(report.unproven)} {records} of the story not proven yet (not in "
                "the checkpoint)"
            )
        if report.omitted_records:
            records = "record" if report.omitted_records == 1 else "records"
            summary += f"; {report.omitted_records} {records} of the story left out"
        if report.omitted_bodies:
            bodies = "body" if report.omitted_bodies == 1 else "bodies"
            summary += f"; {report.omitted_bodies} {bodies} left out"
        print(summary)
        return 0
    print(f"bundle FAILED: {len(report.failures)} problems", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
