"""The inbox's days and what retention holds back (docs/console.md, "The inbox's days and
retention"): each partition of the inbox with its estimated rows and size, when retention
drops it, and for a day past retention whether it is held and why, each reason linked to
the rows that hold it. Read-only, for whoever may view the inbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode

from core.times import time_display

from ..models import InboxEvent
from ..partitions import (
    INBOX,
    PartitionRetention,
    inbox_partitions_retention,
    is_partitioned,
    partition_held_sources,
    retention_horizon,
)
from ..statements import BULK_REPLAY_LIVE_STATES, RELAY_UNFINISHED_STATUSES

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin
else:
    _ModelAdmin = object

# A hold reason (``partitions.HOLD_REASONS``) in words.
HOLD_WORDS = {
    "unfinished": "Rows not finished: received, processing or failed.",
    "open_evidence": (
        "Evidence of a conflict, not marked investigated, names one of its rows."
    ),
    "paused_source": "Rows of a paused or draining source.",
    "bulk_replay": "Dead-lettered rows, while a bulk replay job is live.",
}


@dataclass(frozen=True)
class Link:
    text: str
    url: str


@dataclass(frozen=True)
class Hold:
    reason: str
    words: str
    links: list[Link]


def _changelist(name: str, **params: str) -> str:
    return f"{reverse(f'admin:{name}_changelist')}?{urlencode(params)}"


def _day_params(day: PartitionRetention, field: str = "received_at") -> dict[str, str]:
    """The list filter of the rows received on the partition's day (its exact bounds)."""
    params = {f"{field}__lt": day.end.isoformat()}
    if day.start is not None:
        params[f"{field}__gte"] = day.start.isoformat()
    return params


def hold_links(day: PartitionRetention, reason: str) -> list[Link]:
    """Where the rows that hold ``day`` for ``reason`` are listed."""
    rows = _day_params(day)
    if reason == "unfinished":
        statuses = ",".join(RELAY_UNFINISHED_STATUSES)
        return [
            Link(
                "its unfinished rows",
                _changelist(
                    "webhooks_inboxevent", processing_status__in=statuses, **rows
                ),
            )
        ]
    if reason == "open_evidence":
        return [
            Link(
                "the evidence not investigated",
                _changelist(
                    "webhooks_fingerprintmismatch",
                    investigated_at__isempty="1",
                    **_day_params(day, "event__received_at"),
                ),
            )
        ]
    if reason == "paused_source":
        return [
            Link(
                f"the rows of {slug}",
                _changelist("webhooks_inboxevent", source__id__exact=str(pk), **rows),
            )
            for pk, slug in partition_held_sources(day.name)
        ]
    if reason == "bulk_replay":
        return [
            Link(
                "its dead-lettered rows",
                _changelist("webhooks_deadletteredevent", **rows),
            ),
            Link(
                "the live bulk replay jobs",
                _changelist(
                    "webhooks_bulkreplayjob",
                    state__in=",".join(BULK_REPLAY_LIVE_STATES),
                ),
            ),
        ]
    return []


def _day_words(day: PartitionRetention) -> str:
    if day.start is None:
        return f"every day before {day.end:%Y-%m-%d}"
    return f"{day.start:%Y-%m-%d}"


def _rows_words(rows: int | None) -> str:
    if rows is None:
        return "rows not estimated yet"
    return f"about {rows:,} row{'' if rows == 1 else 's'}"


def _retention(day: PartitionRetention) -> tuple[str, str, str]:
    """The day's state for retention: (tone, words, what follows)."""
    if day.due is None:
        return "neutral", "Kept", "retention is unset"
    if not day.past_retention:
        return "ok", "Within retention", f"dropped from {time_display(day.due)}"
    if day.holds:
        return "warning", "Held back", "past retention, kept while held"
    if day.detached:
        return (
            "ignored",
            "Detached",
            "a run stopped before dropping it: the next drops it",
        )
    return "ignored", "Due", "the next hourly run drops it"


def day_rows(days: list[PartitionRetention]) -> list[dict]:
    shown = []
    for day in days:
        tone, state, note = _retention(day)
        shown.append(
            {
                "name": day.name,
                "attempts": day.attempts,
                "day": _day_words(day),
                "start": time_display(day.start, empty="its first row"),
                "end": time_display(day.end),
                "rows": _rows_words(day.rows),
                "size": day.size,
                "attempt_rows": _rows_words(day.attempt_rows),
                "attempt_size": day.attempt_size,
                "tone": tone,
                "state": state,
                "note": note,
                "past_retention": day.past_retention,
                "holds": [
                    Hold(reason, HOLD_WORDS[reason], hold_links(day, reason))
                    for reason in day.holds
                ],
            }
        )
    return shown


class RetentionPageMixin(_ModelAdmin):
    """The page of the inbox's days (``admin:webhooks_inboxevent_partitions``)."""

    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()
        if self.model is not InboxEvent:
            return urls  # the dead letters' admin is the inbox's too: one page
        # Before the admin's own ``<object_id>/``, which would take the path.
        return [
            path(
                "partitions/",
                self.admin_site.admin_view(self.partitions_view),
                name="webhooks_inboxevent_partitions",
            ),
            *urls,
        ]

    def partitions_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        partitioned = is_partitioned(INBOX)
        days = inbox_partitions_retention() if partitioned else []
        rows = day_rows(days)
        context = {
            **self.admin_site.each_context(request),
            "title": "Inbox days and retention",
            "opts": self.model._meta,
            "partitioned": partitioned,
            "vendor": connection.display_name,
            "retention_days": settings.INBOX_RETENTION_DAYS,
            "horizon": time_display(retention_horizon(), empty=""),
            "days": rows,
            "held": sum(1 for row in rows if row["holds"]),
            "past": sum(1 for row in rows if row["past_retention"]),
        }
        return TemplateResponse(
            request, "admin/webhooks/inboxevent/partitions.html", context
        )
