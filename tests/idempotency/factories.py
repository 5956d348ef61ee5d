"""Idempotency records as ``idempotent_execute`` leaves them."""

from __future__ import annotations

from datetime import timedelta

import factory
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
