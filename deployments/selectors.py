"""Reads."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from core.models import ApiClient

from .idempotency import idempotency_key_is_well_formed
from .models import Build, Deployment, IdempotencyRecord, Job


def job_get(*, model: type[Job], client: ApiClient, public_id: str) -> Job | None:
    """The client's own deployment or build; another client's is as good as absent."""
    return model.objects.filter(client=client, public_id=public_id).first()


def job_list_by_key(
    *, model: type[Job], client: ApiClient, idempotency_key: str | None
) -> QuerySet:
    """The client's jobs; with a key, only the latest operation made with it (a key reused
    after its TTL expired leads to the newer operation)."""
    jobs = model.objects.filter(client=client)
    if idempotency_key is None:
        return jobs
    if not idempotency_key_is_well_formed(idempotency_key):
        return jobs.none()  # no operation can have such a key
    latest = (
        model.objects.filter(client=OuterRef("client"), idempotency_key=idempotency_key)
        .order_by("-id")
        .values("id")[:1]
    )
    return jobs.filter(idempotency_key=idempotency_key, id=Subquery(latest))


def deployment_list(*, client: ApiClient, idempotency_key: str | None) -> QuerySet:
    return job_list_by_key(
        model=Deployment, client=client, idempotency_key=idempotency_key
    )


def build_list(*, client: ApiClient, idempotency_key: str | None) -> QuerySet:
    return job_list_by_key(model=Build, client=client, idempotency_key=idempotency_key)


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


def idempotency_stuck_horizon(*, now: datetime | None = None) -> datetime:
    """A record still ``processing`` since before this is stuck: its job should long have been
    picked up (the sweep re-dispatches after DEPLOY_REDISPATCH_AFTER_SECONDS)."""
    now = now or timezone.now()
    return now - timedelta(seconds=settings.DEPLOY_REDISPATCH_AFTER_SECONDS)


def idempotency_records_stuck(*, now: datetime | None = None) -> QuerySet:
    """The one definition of a stuck key, shared by the gauge, the dashboard and the admin."""
    return IdempotencyRecord.objects.filter(
        status="processing", created_at__lt=idempotency_stuck_horizon(now=now)
    )
