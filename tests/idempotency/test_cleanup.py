"""The idempotency cleanup task: expired keys are marked, records past retention purged."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from idempotency.models import IdempotencyRecord
from idempotency.tasks import idempotency_cleanup_task
from tests.idempotency.factories import IdempotencyRecordFactory

pytestmark = pytest.mark.django_db


@override_settings(IDEMPOTENCY_AUDIT_RETENTION_SECONDS=3600)
def test_cleanup_marks_expired_keys_and_purges_past_retention():
    now = timezone.now()
    live = IdempotencyRecordFactory(key="live")
    due = IdempotencyRecordFactory(key="due", expires_at=now - timedelta(seconds=1))
    kept = IdempotencyRecordFactory(
        key="kept",
        expires_at=now - timedelta(minutes=30),
        expired_at=now - timedelta(minutes=30),
    )
    old = IdempotencyRecordFactory(
        key="old",
        expires_at=now - timedelta(hours=2),
        expired_at=now - timedelta(hours=2),
    )

    assert idempotency_cleanup_task.apply().get() == {"expired": 1, "purged": 1}

    live.refresh_from_db()
    due.refresh_from_db()
    assert live.expired_at is None
    assert due.expired_at is not None
    assert IdempotencyRecord.objects.filter(pk=kept.pk).exists()
    assert not IdempotencyRecord.objects.filter(pk=old.pk).exists()
    assert idempotency_cleanup_task.apply().get() == {"expired": 0, "purged": 0}
