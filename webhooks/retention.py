"""Retention of raw bodies: separate from deduplication, which needs only the metadata."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from .models import TERMINAL_STATUSES, InboxEvent


def inbox_bodies_purge(
    *,
    older_than: datetime,
    batch_size: int = 1000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Drops the raw body of terminal inbox rows received before ``older_than`` and stamps
    ``body_purged_at``; keeps every other column, so the row still answers duplicates. Never
    touches a row that may still be processed. Works in batches, each its own short
    transaction; returns how many bodies were dropped."""
    purged = 0
    while True:
        with transaction.atomic():
            ids = list(
                InboxEvent.objects.select_for_update(skip_locked=True)
                .filter(
                    received_at__lt=older_than,
                    processing_status__in=TERMINAL_STATUSES,
                    body_purged_at__isnull=True,
                )
                .order_by("id")
                .values_list("id", flat=True)[:batch_size]
            )
            if not ids:
                return purged
            purged += InboxEvent.objects.filter(id__in=ids).update(
                raw_body=None, body_purged_at=timezone.now()
            )
        if progress is not None:
            progress(purged)
