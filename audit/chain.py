"""The hash functions of the sealed audit trail, with no database access: what a row digest
covers, what a seal's keyed hash covers, and the legacy (version 1) formulas that seals made
before the trail was keyed still need (docs/security.md, "The retired HMAC chain").

Everything hashed is an unambiguous encoding (a JSON array), never fields joined by a
separator that a field value could contain."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

GENESIS_HASH = "0" * 64

# Version 1: row digests over (id, payload hash, received time), seals chained with plain
# SHA-256. Version 2: row digests over every field an auditor relies on, operator actions
# sealed too. Every seal, whatever its version, is chained with the keyed hash below.
LEGACY_VERSION = 1
SEAL_VERSION = 2

# What an inbox row's digest covers (see ``inbox_row_digest`` for what it leaves out, and why).
# A fixed list, not derived from the model: rows sealed before a column existed must still
# verify, so a new column enters the digest only with a new seal version.
INBOX_SEALED_FIELDS = (
    "pk",
    "source_id",
    "event_id",
    "event_type",
    "entity_id",
    "entity_type",
    "source_version",
    "occurred_at",
    "tenant_id",
    "idempotency_key",
    "payload_hash",
    "content_fingerprint",
    "headers",
    "signature_valid",
    "remote_addr",
    "received_at",
)
# Every field: operator actions are append-only.
ACTION_SEALED_FIELDS = (
    "pk",
    "action",
    "actor_id",
    "actor_name",
    "reason",
    "event_ids",
    "event_count",
    "skipped_count",
    "details",
    "bulk_job_id",
    "created_at",
)

# One encoder, built once: ``json.dumps`` with options builds a new one per call.
_encode = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False
).encode


def time_text(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def inbox_row_digest(row: Sequence[Any]) -> str:
    """Version 2 digest of an inbox row given as the values of ``INBOX_SEALED_FIELDS``: every
    field an auditor relies on to say what arrived, all set once at ingest and never changed by
    the application.

    Left out on purpose: the processing state (status, attempts, error, lease, retry, dispatch
    and processed times) and the duplicate counters (``delivery_count``, ``last_seen_at``),
    which legitimately change after sealing — a seal over them would break at every retry,
    replay or duplicate delivery; and the raw body itself, covered through ``payload_hash``
    (its SHA-256): ``audit_verify`` checks every body that is there against it, so that
    ``purge_inbox`` may drop a body without breaking the seal, while a body changed in place
    is still caught (docs/security.md, "The retired HMAC chain")."""
    values = list(row)
    values[7] = time_text(values[7])  # occurred_at
    values[15] = time_text(values[15])  # received_at
    return hashlib.sha256(_encode(values).encode()).hexdigest()


def action_digest(row: Sequence[Any]) -> str:
    """Digest of an operator action given as the values of ``ACTION_SEALED_FIELDS``."""
    values = list(row)
    values[10] = time_text(values[10])  # created_at
    return hashlib.sha256(_encode(values).encode()).hexdigest()


def legacy_row_digest(
    *, inbox_event_id: int, payload_hash: str, received_at: datetime
) -> str:
    """Version 1 digest: id, payload hash and received time only."""
    received = received_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    line = f"{inbox_event_id}|{payload_hash}|{received}"
    return hashlib.sha256(line.encode()).hexdigest()


def legacy_seal_hash(
    *, previous_hash: str, rows_hash: str, sequence: int, row_count: int
) -> str:
    """How version 1 seals were chained before the key: plain SHA-256, which anyone who can
    write to the database could recompute. Only the upgrade (``audit`` migration 0003) uses it,
    to check the old chain before it is keyed."""
    line = f"{previous_hash}|{rows_hash}|{sequence}|{row_count}"
    return hashlib.sha256(line.encode()).hexdigest()


def digests_hash(digests: Sequence[str]) -> str:
    """The hash of a seal's entries, in id order."""
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def seal_mac(*, key: str, seal: Any) -> str:
    """HMAC-SHA256, under ``AUDIT_SEAL_KEY``, of every field of a seal except its own hash and
    its creation time: the version (so that a seal cannot be passed off as an older, weaker
    one), its place in the chain, the hashes and counts of its inbox rows and operator
    actions, their id ranges and the horizon."""
    message = _encode(
        [
            seal.version,
            seal.sequence,
            seal.previous_hash,
            seal.rows_hash,
            seal.row_count,
            seal.first_event_id,
            seal.last_event_id,
            seal.actions_hash,
            seal.action_count,
            seal.first_action_id,
            seal.last_action_id,
            time_text(seal.horizon),
        ]
    )
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()
