"""Idempotency records as ``idempotent_execute`` leaves them."""

from __future__ import annotations

from datetime import timedelta

import factory
from django.db.models import F
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from tests.core.factories import api_client_make


class IdempotencyRecordFactory(factory.django.DjangoModelFactory):
    """A live key of a ``deployment.create`` operation, still processing."""

    class Meta:
        model = IdempotencyRecord

    client = factory.LazyFunction(lambda: api_client_make()[0])
    operation_type = "deployment.create"
    key = factory.Sequence(lambda n: f"key-{n}")
    fingerprint = "f" * 64
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(days=1))


def idempotency_records_aged(seconds: float) -> None:
    """Every record as it would stand ``seconds`` from now: its times moved that far into the
    past, so that a key whose TTL is shorter than that has run out, without waiting for it
    (expiry is decided against the time of the request that meets the record)."""
    shift = timedelta(seconds=seconds)
    IdempotencyRecord.objects.update(
        created_at=F("created_at") - shift,
        updated_at=F("updated_at") - shift,
        expires_at=F("expires_at") - shift,
        progress_deadline=F("progress_deadline") - shift,
    )
