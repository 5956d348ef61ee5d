"""The retired HMAC chain of the sealed audit trail: a keyed hash chain over the inbox and the
operator actions, made until the verifiable log took over, and its verification, which
``audit_verify`` still runs for the period it covers (docs/security.md, "The retired HMAC
chain"). No seal is made any more: the log's sealer (``audit.sealer``) took the chain in."""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import BinaryField, Case, F, When
from django.db.models.functions import Length

from trail.models import OperatorAction
from webhooks.models import InboxEvent
from webhooks.retention import purge_stamp

from . import chain
from .chain import (
    ACTION_SEALED_FIELDS,
    GENESIS_HASH,
    INBOX_SEALED_FIELDS,
    LEGACY_VERSION,
    SEAL_VERSION,
)
from .leaves import LeafError, leaf_decode
from .models import AuditSeal, AuditSealActionEntry, AuditSealEntry, LogLeaf

logger = logging.getLogger(__name__)

__all__ = [
    "GENESIS_HASH",
    "PurgeExcuses",
    "VerifyReport",
    "audit_trail_verify",
    "inbox_row_digests",
    "rows_hash_compute",
    "seal_hash_compute",
]

LEGACY_INBOX_FIELDS = ("pk", "payload_hash", "received_at")


def rows_hash_compute(digests: Iterable[str]) -> str:
    return chain.digests_hash(list(digests))


def seal_hash_compute(seal: AuditSeal) -> str:
    """The keyed hash a seal must carry, under the current ``AUDIT_SEAL_KEY``."""
    return chain.seal_mac(key=settings.AUDIT_SEAL_KEY, seal=seal)


def _inbox_digest(version: int, row: tuple) -> str:
    if version == LEGACY_VERSION:
        pk, payload_hash, received_at = row
        return chain.legacy_row_digest(
            inbox_event_id=pk, payload_hash=payload_hash, received_at=received_at
        )
    return chain.inbox_row_digest(row)


def _inbox_fields(version: int) -> tuple[str, ...]:
    return LEGACY_INBOX_FIELDS if version == LEGACY_VERSION else INBOX_SEALED_FIELDS


def inbox_row_digests(*, version: int, pks: Iterable[int]) -> dict[int, str]:
    """The digests the inbox rows ``pks`` have now, as a seal of ``version`` computes them."""
    rows = InboxEvent.objects.filter(pk__in=list(pks)).values_list(
        *_inbox_fields(version)
    )
    return {row[0]: _inbox_digest(version, row) for row in rows}


# --- Verification ---------------------------------------------------------------------------

# Bodies are read in groups bounded in bytes as well as in rows: a body may be up to
# WEBHOOK_MAX_BODY_BYTES.
_BODY_GROUP_BYTES = 8 * 1024 * 1024
_BODY_GROUP_ROWS = 1000
# Bodies up to this size come with the row (a few KB is the common case).
INLINE_BODY_BYTES = 16 * 1024
_ACTION_CHUNK = 500


@dataclass
class VerifyReport:
    seals_checked: int = 0
    legacy_seals: int = 0
    rows_checked: int = 0
    actions_checked: int = 0
    broken_seals: list[str] = field(default_factory=list)
    altered_rows: list[int] = field(default_factory=list)
    deleted_rows: list[int] = field(default_factory=list)
    row_problems: dict[int, str] = field(default_factory=dict)
    altered_actions: list[int] = field(default_factory=list)
    deleted_actions: list[int] = field(default_factory=list)
    head: tuple[int, str] | None = None
    head_problem: str = ""

    def problem_lines(self) -> list[str]:
        """What ``audit_verify`` prints of the chain's problems, one line each."""
        return [
            *(f"BROKEN {problem}" for problem in self.broken_seals),
            *(
                f"ALTERED inbox event {pk}: {self.row_problems[pk]}"
                for pk in self.altered_rows
            ),
            *(f"DELETED inbox event {pk}" for pk in self.deleted_rows),
            *(f"ALTERED operator action {pk}" for pk in self.altered_actions),
            *(f"DELETED operator action {pk}" for pk in self.deleted_actions),
            *([self.head_problem] if self.head_problem else []),
        ]

    @property
    def ok(self) -> bool:
        return not (
            self.broken_seals
            or self.altered_rows
            or self.deleted_rows
            or self.altered_actions
            or self.deleted_actions
            or self.head_problem
        )


class PurgeExcuses:
    """Which missing bodies a recorded purge accounts for: a row whose ``body_purged_at``
    carries the stamp of a purge that names it. The purges are the log's ``body_purge``
    entries (what a purge appends in the transaction that drops the bodies, and what the
    chain's retirement recorded for the purges before the log): a ``purge_bodies`` operator
    action that is only in the table, never in the log, excuses nothing
    (docs/security.md, "What the log holds")."""

    def __init__(self, stamps: Mapping[int, str] | None = None) -> None:
        self._given = stamps

    @classmethod
    def of(cls, purges: Mapping[int, tuple[str, int]]) -> PurgeExcuses:
        """From inbox row id -> (stamp, action id), as the chain's retirement finds them."""
        return cls({pk: stamp for pk, (stamp, _) in purges.items()})

    def _logged(self, pks: list[int]) -> dict[int, str]:
        stamps: dict[int, str] = {}
        for record_id, text in LogLeaf.objects.filter(
            kind="body_purge", record_id__in=pks
        ).values_list("record_id", "leaf"):
            try:
                stamp = leaf_decode(text).get("purged_at")
            except LeafError:
                continue
            if isinstance(stamp, str):
                stamps[record_id] = stamp
        return stamps

    def covered(self, missing: Mapping[int, datetime]) -> set[int]:
        """Of ``missing`` (inbox row id -> its ``body_purged_at``), those a purge took."""
        if not missing:
            return set()
        pks = list(missing)
        stamps = (
            {pk: self._given[pk] for pk in pks if pk in self._given}
            if self._given is not None
            else self._logged(pks)
        )
        return {pk for pk, at in missing.items() if stamps.get(pk) == purge_stamp(at)}


def body_groups(lengths: dict[int, int]) -> Iterator[list[int]]:
    group: list[int] = []
    size = 0
    for pk, length in lengths.items():
        if group and (
            size + length > _BODY_GROUP_BYTES or len(group) >= _BODY_GROUP_ROWS
        ):
            yield group
            group, size = [], 0
        group.append(pk)
        size += length
    if group:
        yield group


def _inbox_rows_check(
    report: VerifyReport,
    *,
    version: int,
    sealed: dict[int, str],
    purges: PurgeExcuses,
) -> None:
    """Compares sealed rows with the inbox as it is now: their sealed fields (digest), their
    body against their payload hash, a missing body against the recorded purges."""
    fields = _inbox_fields(version)
    payload_at = fields.index("payload_hash")
    problems: dict[int, list[str]] = defaultdict(list)
    seen: set[int] = set()
    payload_hashes: dict[int, str] = {}
    large_bodies: dict[int, int] = {}
    purged: dict[int, datetime] = {}

    def body_check(pk: int, body: Any) -> None:
        if hashlib.sha256(body).hexdigest() != payload_hashes[pk]:
            problems[pk].append("body does not match its payload hash")

    # Small bodies come with their row; larger ones are read afterwards in bounded groups.
    rows = (
        InboxEvent.objects.filter(pk__in=list(sealed))
        .annotate(
            body_length=Length("raw_body"),
            small_body=Case(
                When(body_length__lte=INLINE_BODY_BYTES, then=F("raw_body")),
                default=None,
                output_field=BinaryField(),
            ),
        )
        .values_list(*fields, "body_purged_at", "body_length", "small_body")
    )
    for row in rows:
        values, (purged_at, body_length, small_body) = row[:-3], row[-3:]
        pk = values[0]
        seen.add(pk)
        if _inbox_digest(version, values) != sealed[pk]:
            problems[pk].append("sealed fields changed")
        if body_length is not None:
            # Whatever body_purged_at says: a body that is there must be the one received.
            payload_hashes[pk] = values[payload_at]
            if small_body is not None:
                body_check(pk, small_body)
            else:
                large_bodies[pk] = body_length
        elif purged_at is None:
            problems[pk].append("body missing, never purged")
        else:
            purged[pk] = purged_at
    covered = purges.covered(purged)
    for pk in purged:
        if pk not in covered:
            problems[pk].append("body missing outside any logged purge")
    for group in body_groups(large_bodies):
        for pk, body in InboxEvent.objects.filter(pk__in=group).values_list(
            "pk", "raw_body"
        ):
            if body is not None:
                body_check(pk, body)
    for pk in sealed:
        report.rows_checked += 1
        if pk not in seen:
            report.deleted_rows.append(pk)
        elif pk in problems:
            report.altered_rows.append(pk)
            report.row_problems[pk] = "; ".join(problems[pk])


def _actions_check(report: VerifyReport, *, sealed: dict[int, str]) -> None:
    current = {
        row[0]: chain.action_digest(row)
        for row in OperatorAction.objects.filter(pk__in=list(sealed)).values_list(
            *ACTION_SEALED_FIELDS
        )
    }
    for pk, digest in sealed.items():
        report.actions_checked += 1
        if pk not in current:
            report.deleted_actions.append(pk)
        elif current[pk] != digest:
            report.altered_actions.append(pk)


def _seal_problems(
    seal: AuditSeal,
    *,
    expected_sequence: int,
    previous_hash: str,
    newest_version: int,
    entries: list[tuple[int, str]],
    action_entries: list[tuple[int, str]],
) -> list[str]:
    problems = []
    if seal.sequence != expected_sequence:
        problems.append(f"sequence {seal.sequence}, expected {expected_sequence}")
    if seal.previous_hash != previous_hash:
        problems.append("previous_hash does not match the previous seal")
    if seal.version not in (LEGACY_VERSION, SEAL_VERSION):
        problems.append(f"unknown version {seal.version}")
    elif seal.version < newest_version:
        problems.append(f"version {seal.version} after a seal of {newest_version}")
    if len(entries) != seal.row_count or (
        rows_hash_compute(d for _, d in entries) != seal.rows_hash
    ):
        problems.append("its inbox entries do not match rows_hash")
    if seal.version == LEGACY_VERSION:
        if action_entries or seal.action_count:
            problems.append("a seal of version 1 holds operator actions")
    elif len(action_entries) != seal.action_count or (
        rows_hash_compute(d for _, d in action_entries) != seal.actions_hash
    ):
        problems.append("its operator action entries do not match actions_hash")
    if seal_hash_compute(seal) != seal.seal_hash:
        problems.append("seal_hash does not match its contents under AUDIT_SEAL_KEY")
    return problems


def audit_trail_verify(
    *,
    expect_head: tuple[int, str] | None = None,
    chunk_size: int = 5000,
    purges: PurgeExcuses | None = None,
) -> VerifyReport:
    """Recomputes the chain from the first seal under ``AUDIT_SEAL_KEY`` and compares every
    sealed inbox row and operator action with the database as it is now: names the seals
    whose chain or entries were tampered with, the rows and actions altered or deleted since
    they were sealed, and the rows whose body no longer matches its payload hash or went
    missing outside a recorded purge.

    ``report.head`` is the last seal's (sequence, hash): kept outside the database, it is what
    ``expect_head`` checks a later run against, so that a chain cut short (and possibly sealed
    again from there) is caught."""
    report = VerifyReport()
    purges = purges or PurgeExcuses()
    previous_hash = GENESIS_HASH
    expected_sequence = 1
    newest_version = LEGACY_VERSION
    expected_head_hash: str | None = None
    for seal in AuditSeal.objects.order_by("sequence").iterator(chunk_size=500):
        report.seals_checked += 1
        if seal.version == LEGACY_VERSION:
            report.legacy_seals += 1
        entries = list(
            AuditSealEntry.objects.filter(seal=seal)
            .order_by("inbox_event_id")
            .values_list("inbox_event_id", "row_digest")
        )
        action_entries = list(
            AuditSealActionEntry.objects.filter(seal=seal)
            .order_by("operator_action_id")
            .values_list("operator_action_id", "row_digest")
        )
        problems = _seal_problems(
            seal,
            expected_sequence=expected_sequence,
            previous_hash=previous_hash,
            newest_version=newest_version,
            entries=entries,
            action_entries=action_entries,
        )
        if problems:
            report.broken_seals.append(f"seal #{seal.sequence}: " + "; ".join(problems))
        for start in range(0, len(entries), chunk_size):
            _inbox_rows_check(
                report,
                version=seal.version,
                sealed=dict(entries[start : start + chunk_size]),
                purges=purges,
            )
        for start in range(0, len(action_entries), _ACTION_CHUNK):
            _actions_check(
                report, sealed=dict(action_entries[start : start + _ACTION_CHUNK])
            )
        if expect_head is not None and seal.sequence == expect_head[0]:
            expected_head_hash = seal.seal_hash
        previous_hash = seal.seal_hash
        expected_sequence = seal.sequence + 1
        newest_version = max(newest_version, seal.version)
        report.head = (seal.sequence, seal.seal_hash)
    if expect_head is not None:
        sequence, seal_hash = expect_head
        last = report.head[0] if report.head else 0
        if last < sequence:
            report.head_problem = (
                f"TRUNCATED the chain ends at seal #{last}, before the expected head "
                f"#{sequence}"
            )
        elif expected_head_hash != seal_hash:
            report.head_problem = (
                f"HEAD MISMATCH seal #{sequence} is {expected_head_hash or 'missing'}, "
                f"expected {seal_hash}"
            )
    return report
