"""Investigations of fingerprint mismatches: the evidence ingest kept of a conflicting
duplicate, marked investigated by an operator."""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.actors import Actor
from trail.models import OperatorAction
from trail.services import MarkInvestigatedDetails, operator_action_record

from .errors import SelectionTooLarge
from .models import FingerprintMismatch

logger = logging.getLogger(__name__)


# Mismatches one "Mark investigated" takes (one transaction, one operator action).
MARK_INVESTIGATED_MAX = 10_000


def fingerprint_mismatches_mark_investigated(
    *, mismatches: QuerySet[FingerprintMismatch], actor: Actor, note: str
) -> OperatorAction:
    """Marks the open mismatches investigated with the note and records one operator action.
    One transaction: at most ``MARK_INVESTIGATED_MAX`` rows (more raise
    ``SelectionTooLarge``, changing nothing), far below the database's 65,535 parameters of
    one statement."""
    selected = list(
        mismatches.order_by().values_list("pk", flat=True)[: MARK_INVESTIGATED_MAX + 1]
    )
    if len(selected) > MARK_INVESTIGATED_MAX:
        raise SelectionTooLarge(MARK_INVESTIGATED_MAX)
    now = timezone.now()
    with transaction.atomic():
        rows = list(
            FingerprintMismatch.objects.filter(
                pk__in=selected, investigated_at__isnull=True
            )
            .select_for_update()
            .order_by("pk")
            .only("pk", "event_id")
        )
        ids = [row.pk for row in rows]
        FingerprintMismatch.objects.filter(pk__in=ids).update(
            investigated_at=now, investigated_by=actor.user, investigation_note=note
        )
        return operator_action_record(
            action=OperatorAction.Action.MARK_INVESTIGATED,
            actor=actor,
            reason=note,
            event_ids=sorted({row.event_id for row in rows}),
            event_count=len(ids),
            details=MarkInvestigatedDetails(mismatch_ids=ids),
        )
