"""Reads."""

from __future__ import annotations

import functools
from datetime import datetime

from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from .models import InboxEvent, WebhookSecret, WebhookSource

_SOURCE_FIELDS = ("id", "slug", "scheme", "handler", "timestamp_tolerance_seconds")


@functools.cache
def _source_with_secrets_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    source = quote(WebhookSource._meta.db_table)
    secret = quote(WebhookSecret._meta.db_table)
    columns = ", ".join(f"s.{quote(name)}" for name in _SOURCE_FIELDS)
    return (
        f"SELECT {columns}, k.secret FROM {source} s"  # noqa: S608 - constant names
        f" LEFT JOIN {secret} k ON k.source_id = s.id"
        " AND (k.expires_at IS NULL OR k.expires_at > %s)"
        " WHERE s.slug = %s AND s.is_enabled = %s"
    )


def webhook_source_with_secrets(
    *, slug: str, now: datetime | None = None
) -> tuple[WebhookSource, list[str]] | None:
    """The enabled source and its valid secrets (possibly none), in one query: this runs on
    every webhook request, so it skips the ORM's query compilation."""
    now = now or timezone.now()
    expires_at = WebhookSecret._meta.get_field("expires_at")
    params = [expires_at.get_db_prep_value(now, connection), slug, True]
    with connection.cursor() as cursor:
        cursor.execute(_source_with_secrets_sql(connection.vendor), params)
        rows = cursor.fetchall()
    if not rows:
        return None
    source = WebhookSource.from_db(
        connection.alias, _SOURCE_FIELDS, rows[0][: len(_SOURCE_FIELDS)]
    )
    return source, [row[-1] for row in rows if row[-1] is not None]


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
