"""Reads."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from .models import InboxEvent, WebhookSecret, WebhookSource


def webhook_source_get_enabled(*, slug: str) -> WebhookSource | None:
    return WebhookSource.objects.filter(slug=slug, is_enabled=True).first()


def webhook_source_with_secrets(
    *, slug: str, now: datetime | None = None
) -> tuple[WebhookSource, list[str]] | None:
    """The enabled source and its valid secrets, in one query on the hot path (a second one
    only when no secret is valid or the slug is unknown)."""
    now = now or timezone.now()
    rows = list(
        WebhookSecret.objects.filter(source__slug=slug, source__is_enabled=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .select_related("source")
        .only("secret", "source")
    )
    if rows:
        return rows[0].source, [row.secret for row in rows]
    source = webhook_source_get_enabled(slug=slug)
    return None if source is None else (source, [])


def webhook_source_list() -> QuerySet[WebhookSource]:
    from django.db.models import Count

    return WebhookSource.objects.annotate(secret_count=Count("secrets")).order_by(
        "slug"
    )


def webhook_secrets_valid(
    *, source: WebhookSource, now: datetime | None = None
) -> list[str]:
    """The secrets that verify signatures right now: the current one(s) and those still in
    their rotation grace period."""
    now = now or timezone.now()
    return list(
        WebhookSecret.objects.filter(source=source)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .values_list("secret", flat=True)
    )


def inbox_event_get(*, source_slug: str, event_id: str) -> InboxEvent | None:
    return (
        InboxEvent.objects.filter(source__slug=source_slug, event_id=event_id)
        .defer("raw_body", "headers")
        .first()
    )
