"""What a leaf of the verifiable log is: the UTF-8 canonical JSON (sorted keys, no spaces) of a
record's immutable fields with its ``"kind"`` and ``"id"`` (docs/security.md, "Verifiable
log"). No Django here: the offline verifier decodes leaves with the same functions.

Which fields of which records become leaves is the business of the code that feeds the log
(``audit.log.log_append``); this module only fixes the encoding, so that the bytes hashed are
the bytes an auditor is given."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# ``kind`` names a ledger: lowercase words joined by underscores ("inbox_event").
KIND_MAX_LENGTH = 40

_encode = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


class LeafError(ValueError):
    """A leaf that cannot be encoded, or bytes that are not a leaf."""


@dataclass(frozen=True)
class LeafInput:
    """One record to log. ``fields`` are its immutable fields as JSON values (text, integers,
    booleans, null, lists, objects; times as ISO 8601 text), without ``kind`` and ``id``."""

    kind: str
    record_id: int
    fields: Mapping[str, Any] = field(default_factory=dict)


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, non-ASCII as is, no NaN or infinity."""
    try:
        return _encode(value)
    except (TypeError, ValueError) as exc:
        raise LeafError(f"not canonical JSON: {exc}") from None


def leaf_encode(leaf: LeafInput) -> str:
    """The leaf's canonical JSON text; its UTF-8 bytes are what the tree hashes."""
    if (
        not leaf.kind
        or len(leaf.kind) > KIND_MAX_LENGTH
        or not leaf.kind.replace("_", "").isalnum()
        or not leaf.kind.isascii()
        or leaf.kind != leaf.kind.lower()
    ):
        raise LeafError(f"kind {leaf.kind!r} is not lowercase words joined by '_'")
    if isinstance(leaf.record_id, bool) or not isinstance(leaf.record_id, int):
        raise LeafError("record_id is an integer")
    clash = {"kind", "id"} & set(leaf.fields)
    if clash:
        raise LeafError(f"fields may not be named {sorted(clash)}: the leaf sets them")
    return canonical_json({**leaf.fields, "kind": leaf.kind, "id": leaf.record_id})


def leaf_decode(text: str) -> dict[str, Any]:
    """The object a leaf holds, once its text is checked to be canonical (re-encoding it gives
    the same text) with a ``kind`` and an integer ``id``."""
    try:
        value = json.loads(text)
    except ValueError:
        raise LeafError("the leaf is not JSON") from None
    if not isinstance(value, dict):
        raise LeafError("the leaf is not a JSON object")
    if canonical_json(value) != text:
        raise LeafError("the leaf is not in canonical form (sorted keys, no spaces)")
    if not isinstance(value.get("kind"), str) or type(value.get("id")) is not int:
        raise LeafError("the leaf has no kind or no integer id")
    return value
