"""Chains of the retired HMAC sealer, for the tests of what the product still does with them
(``audit_verify`` checks the chain for the period it covers; the log's first sealing round
takes it in: ``audit.sealer.hmac_chain_retire``). The product makes no seal any more: this is
the sealer as it was (version 2 seals, keyed under ``AUDIT_SEAL_KEY``, inbox rows and operator
actions in id order), without its lookback floor."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from audit import chain
from audit.chain import ACTION_SEALED_FIELDS, GENESIS_HASH, INBOX_SEALED_FIELDS
from audit.models import AuditSeal, AuditSealActionEntry, AuditSealEntry
from audit.services import rows_hash_compute, seal_hash_compute
from trail.models import OperatorAction
from webhooks.models import InboxEvent


def hmac_seal(
    *, now: datetime | None = None, batch_size: int | None = None
) -> list[AuditSeal]:
    """Seals what no seal holds yet, received or created before ``now`` minus the horizon, into
    batches of ``batch_size`` (``AUDIT_SEAL_BATCH_SIZE``), as the retired sealer did."""
    now = now or timezone.now()
    horizon = now - timedelta(seconds=settings.AUDIT_SEAL_HORIZON_SECONDS)
    batch_size = batch_size or settings.AUDIT_SEAL_BATCH_SIZE
    seals = []
    while True:
        with transaction.atomic():
            last = AuditSeal.objects.order_by("-sequence").first()
            rows = list(
                InboxEvent.objects.filter(received_at__lt=horizon)
                .filter(
                    ~Exists(
                        AuditSealEntry.objects.filter(inbox_event_id=OuterRef("pk"))
                    )
                )
                .order_by("pk")
                .values_list(*INBOX_SEALED_FIELDS)[:batch_size]
            )
            actions = list(
                OperatorAction.objects.filter(created_at__lt=horizon)
                .filter(
                    ~Exists(
                        AuditSealActionEntry.objects.filter(
                            operator_action_id=OuterRef("pk")
                        )
                    )
                )
                .order_by("pk")
                .values_list(*ACTION_SEALED_FIELDS)[:batch_size]
            )
            if not rows and not actions:
                return seals
            row_digests = [chain.inbox_row_digest(row) for row in rows]
            action_digests = [chain.action_digest(row) for row in actions]
            seal = AuditSeal(
                version=chain.SEAL_VERSION,
                sequence=(last.sequence + 1) if last else 1,
                previous_hash=last.seal_hash if last else GENESIS_HASH,
                rows_hash=rows_hash_compute(row_digests),
                row_count=len(rows),
                first_event_id=rows[0][0] if rows else None,
                last_event_id=rows[-1][0] if rows else None,
                actions_hash=rows_hash_compute(action_digests),
                action_count=len(actions),
                first_action_id=actions[0][0] if actions else None,
                last_action_id=actions[-1][0] if actions else None,
                horizon=horizon,
            )
            seal.seal_hash = seal_hash_compute(seal)
            seal.save()
            AuditSealEntry.objects.bulk_create(
                AuditSealEntry(inbox_event_id=row[0], seal=seal, row_digest=digest)
                for row, digest in zip(rows, row_digests, strict=True)
            )
            AuditSealActionEntry.objects.bulk_create(
                AuditSealActionEntry(
                    operator_action_id=row[0], seal=seal, row_digest=digest
                )
                for row, digest in zip(actions, action_digests, strict=True)
            )
            seals.append(seal)
