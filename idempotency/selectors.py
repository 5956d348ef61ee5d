"""Reads."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from core.models import ApiClient

from .keys import idempotency_key_is_well_formed
from .models import IdempotencyRecord, IdempotencyStatus


def idempotency_record_get(
    *, client: ApiClient, operation_type: str, key: str
) -> IdempotencyRecord | None:
    """The live record of the client's key, else its latest expired one."""
    if not idempotency_key_is_well_formed(key):
        return None
    records = IdempotencyRecord.objects.filter(
        client=client, operation_type=operation_type, key=key
    ).defer("response_body")
    live = next(iter(records.filter(expired_at__isnull=True)[:1]), None)
    if live is not None:
        return live
    return (
        records.filter(expired_at__isnull=False).order_by("-expired_at", "-id").first()
    )


def idempotency_stuck_q(*, now: datetime | None = None) -> Q:
    """The one definition of a stuck key, shared by the gauge, the dashboard and the admin:
    still ``processing`` past its operation's own deadline (``progress_deadline``, kept by the
    app that owns the operation: a queued job not picked up in time, a running one whose
    lease ran out). A long operation that keeps to its deadline is not stuck, however old."""
    return Q(
        status=IdempotencyStatus.PROCESSING,
        progress_deadline__lt=now or timezone.now(),
    )


def idempotency_records_stuck(*, now: datetime | None = None) -> QuerySet:
    return IdempotencyRecord.objects.filter(idempotency_stuck_q(now=now))
