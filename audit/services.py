"""The sealed audit trail: a hash chain over the inbox, written off the request path, and its
verification."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from webhooks.models import InboxEvent

from .models import AuditSeal, AuditSealEntry

logger = logging.getLogger(__name__)

GENESIS_HASH = "0" * 64


# --- Sealed audit trail ---------------------------------------------------------------------


def row_digest(*, inbox_event_id: int, payload_hash: str, received_at: datetime) -> str:
    received = received_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    line = f"{inbox_event_id}|{payload_hash}|{received}"
    return hashlib.sha256(line.encode()).hexdigest()


def rows_hash_compute(digests: list[str]) -> str:
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def seal_hash_compute(
    *, previous_hash: str, rows_hash: str, sequence: int, row_count: int
) -> str:
    line = f"{previous_hash}|{rows_hash}|{sequence}|{row_count}"
    return hashlib.sha256(line.encode()).hexdigest()


_SEAL_LOCK_KEY = 0x5EA1  # one sealer at a time, across every worker


def inbox_rows_seal(
    *, now: datetime | None = None, max_batches: int = 50
) -> list[AuditSeal]:
    """Seals inbox rows older than the horizon that no seal holds yet, in id order, into
    hash-chained batches. Idempotent and safe to run concurrently (one sealer at a time)."""
    now = now or timezone.now()
    horizon = now - timedelta(seconds=settings.AUDIT_SEAL_HORIZON_SECONDS)
    lookback = now - timedelta(seconds=settings.AUDIT_SEAL_LOOKBACK_SECONDS)
    batch_size = settings.AUDIT_SEAL_BATCH_SIZE
    seals: list[AuditSeal] = []
    for _ in range(max_batches):
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_try_advisory_xact_lock(%s)", [_SEAL_LOCK_KEY]
                    )
                    if not cursor.fetchone()[0]:
                        return seals
            last = AuditSeal.objects.order_by("-sequence").first()
            # Rows below the floor were all sealed (or committed) long ago: a transaction
            # open for longer than the lookback is not a case the trail has to cover.
            floor = 0
            old_seal = (
                AuditSeal.objects.filter(created_at__lt=lookback)
                .order_by("-sequence")
                .first()
            )
            if old_seal is not None:
                floor = old_seal.last_event_id
            # NOT EXISTS: an anti-join on the entries' unique index, whatever their number.
            candidates = list(
                InboxEvent.objects.filter(pk__gt=floor, received_at__lt=horizon)
                .filter(
                    ~Exists(
                        AuditSealEntry.objects.filter(inbox_event_id=OuterRef("pk"))
                    )
                )
                .order_by("pk")
                .values_list("pk", "payload_hash", "received_at")[:batch_size]
            )
            if not candidates:
                return seals
            digests = [
                row_digest(inbox_event_id=pk, payload_hash=ph, received_at=ra)
                for pk, ph, ra in candidates
            ]
            sequence = (last.sequence + 1) if last else 1
            previous_hash = last.seal_hash if last else GENESIS_HASH
            rows_hash = rows_hash_compute(digests)
            seal = AuditSeal.objects.create(
                sequence=sequence,
                previous_hash=previous_hash,
                rows_hash=rows_hash,
                seal_hash=seal_hash_compute(
                    previous_hash=previous_hash,
                    rows_hash=rows_hash,
                    sequence=sequence,
                    row_count=len(candidates),
                ),
                row_count=len(candidates),
                first_event_id=candidates[0][0],
                last_event_id=candidates[-1][0],
                horizon=horizon,
            )
            AuditSealEntry.objects.bulk_create(
                AuditSealEntry(inbox_event_id=pk, seal=seal, row_digest=digest)
                for (pk, _, _), digest in zip(candidates, digests, strict=True)
            )
            seals.append(seal)
        logger.info(
            "audit.sealed",
            extra={"sequence": seal.sequence, "row_count": seal.row_count},
        )
        if len(candidates) < batch_size:
            break
    return seals


@dataclass
class VerifyReport:
    seals_checked: int = 0
    rows_checked: int = 0
    broken_seals: list[str] = field(default_factory=list)
    altered_rows: list[int] = field(default_factory=list)
    deleted_rows: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.broken_seals or self.altered_rows or self.deleted_rows)


def audit_trail_verify(*, chunk_size: int = 5000) -> VerifyReport:
    """Recomputes the chain from the first seal and compares every sealed row with the inbox
    as it is now: names the seals whose chain or entries were tampered with, and the rows that
    were altered or deleted since they were sealed."""
    report = VerifyReport()
    previous_hash = GENESIS_HASH
    expected_sequence = 1
    for seal in AuditSeal.objects.order_by("sequence").iterator(chunk_size=500):
        report.seals_checked += 1
        entries = list(
            AuditSealEntry.objects.filter(seal=seal)
            .order_by("inbox_event_id")
            .values_list("inbox_event_id", "row_digest")
        )
        problems = []
        if seal.sequence != expected_sequence:
            problems.append(f"sequence {seal.sequence}, expected {expected_sequence}")
        if seal.previous_hash != previous_hash:
            problems.append("previous_hash does not match the previous seal")
        digests = [digest for _, digest in entries]
        if (
            len(entries) != seal.row_count
            or rows_hash_compute(digests) != seal.rows_hash
        ):
            problems.append("its entries do not match rows_hash")
        recomputed = seal_hash_compute(
            previous_hash=seal.previous_hash,
            rows_hash=seal.rows_hash,
            sequence=seal.sequence,
            row_count=seal.row_count,
        )
        if recomputed != seal.seal_hash:
            problems.append("seal_hash does not match its contents")
        if problems:
            report.broken_seals.append(f"seal #{seal.sequence}: " + "; ".join(problems))
        for start in range(0, len(entries), chunk_size):
            part = dict(entries[start : start + chunk_size])
            current = {
                pk: row_digest(inbox_event_id=pk, payload_hash=ph, received_at=ra)
                for pk, ph, ra in InboxEvent.objects.filter(pk__in=part).values_list(
                    "pk", "payload_hash", "received_at"
                )
            }
            for pk, digest in part.items():
                report.rows_checked += 1
                if pk not in current:
                    report.deleted_rows.append(pk)
                elif current[pk] != digest:
                    report.altered_rows.append(pk)
        previous_hash = seal.seal_hash
        expected_sequence = seal.sequence + 1
    return report
