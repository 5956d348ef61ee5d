"""Reads."""

from __future__ import annotations

from django.db.models import OuterRef, QuerySet, Subquery

from core.models import ApiClient
from idempotency.keys import idempotency_key_is_well_formed

from .models import Job


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
        .order_by("-pk")
        .values("pk")[:1]
    )
    return jobs.filter(idempotency_key=idempotency_key, pk=Subquery(latest))
