"""Secret rotations that race: real threads, each on its own PostgreSQL connection."""

import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from core.actors import Actor
from webhooks.models import WebhookSecret
from webhooks.sources import webhook_source_rotate

from .factories import WebhookSourceFactory

pytestmark = pytest.mark.django_db(transaction=True)

GRACE_SECONDS = 600
ROUNDS = 8
ROTATIONS_AT_ONCE = 3


def rotate_at_once(source, n: int) -> list[Exception]:
    barrier = threading.Barrier(n)
    errors: list[Exception] = []

    def rotate(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            webhook_source_rotate(
                source=source,
                secret=f"rotated-secret-{source.slug}-{i}-0123456789",
                grace_seconds=GRACE_SECONDS,
                actor=Actor(name="race"),
            )
        except Exception as exc:  # asserted on by the caller
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=rotate, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors


def test_rotations_at_once_leave_exactly_one_secret_without_expiry():
    """Without the source's row lock, a rotation does not see the secret that a concurrent
    one has just added, and both new secrets stay valid for ever."""
    sources = [WebhookSourceFactory(slug=f"race-{n}") for n in range(ROUNDS)]
    for source in sources:
        assert rotate_at_once(source, ROTATIONS_AT_ONCE) == []
    latest_grace_end = timezone.now() + timedelta(seconds=GRACE_SECONDS)

    for source in sources:
        secrets = list(WebhookSecret.objects.filter(source=source))
        assert len(secrets) == 1 + ROTATIONS_AT_ONCE
        current = [s for s in secrets if s.expires_at is None]
        assert len(current) == 1, f"{source.slug}: {len(current)} secrets never expire"
        # Every other secret, the original one and each losing rotation's, expires within
        # the grace period.
        for secret in secrets:
            if secret.expires_at is not None:
                assert secret.expires_at <= latest_grace_end
