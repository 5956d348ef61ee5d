"""The story of one inbox event, oldest first, as the console's event page tells it: every
delivery (the first, its identical duplicates, each conflicting copy kept as mismatch
evidence), every processing attempt with the round it belongs to (the first delivery's, or
the replay that started it: by whom, when, why), every operator action that named the event
or its evidence, its body's purge, and what it produced, or why it produced nothing.

Attempts carry no round of their own: a replay moves the row back to ``received`` with its
attempt count at zero and records one operator action naming it (``webhooks.replay``), so the
round of an attempt is the latest replay of the event recorded before the attempt started."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, models
from django.db.models import Q

from trail.models import OperatorAction

from .models import (
    TERMINAL_STATUSES,
    FingerprintMismatch,
    InboxAttempt,
    InboxEvent,
    ProcessingStatus,
)
from .selectors import inbox_event_products

# At most this many records of each kind are told (an event replayed a thousand times is
# told by the first of each kind): the page stays bounded whatever the event went
# through; the lists of attempts and operator actions have the rest.
STORY_MAX_PER_KIND = 500

REPLAY_ACTIONS = (OperatorAction.Action.REPLAY, OperatorAction.Action.BULK_REPLAY)

# The order of entries recorded in the same instant: what happens first in the product.
_KIND_ORDER = {
    "delivery": 0,
    "conflict": 1,
    "duplicates": 2,
    "action": 3,
    "attempt": 4,
    "product": 5,
    "no_product": 6,
    "purge": 7,
}


@dataclass(frozen=True)
class Round:
    """A round of attempts: the first delivery's (``number`` 1, no replay), or one started
    by a replay (``replay``, the operator action that recorded it)."""

    number: int
    replay: OperatorAction | None = None


@dataclass(frozen=True)
class StoryEntry:
    """One line of the story. ``kind`` is one of ``_KIND_ORDER``; ``record`` the row it tells
    (a mismatch, an operator action, an attempt, a product), ``round`` an attempt's round,
    ``count`` how many deliveries it stands for, ``note`` the words the product recorded."""

    at: datetime | None
    kind: str
    record: models.Model | None = None
    round: Round | None = None
    count: int = 0
    note: str = ""
    last_at: datetime | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _json_list_contains(
    queryset: models.QuerySet[OperatorAction], field_name: str, values: list[int]
) -> models.QuerySet[OperatorAction]:
    """The actions of ``queryset`` whose JSON list ``field_name`` holds any of ``values``."""
    if not values:
        return queryset.none()
    if connection.vendor == "postgresql":
        condition = Q()
        for value in values:
            condition |= Q(**{f"{field_name}__contains": [value]})
        return queryset.filter(condition)
    # SQLite (the embedded default) has no JSON containment; its tables are small.
    path = field_name.split("__")
    wanted = set(values)
    found = []
    for pk, stored in queryset.values_list("pk", path[0]):
        item: Any = stored
        for key in path[1:]:
            item = item.get(key) if isinstance(item, dict) else None
        if isinstance(item, list) and wanted & {v for v in item if isinstance(v, int)}:
            found.append(pk)
    return queryset.filter(pk__in=found)


def inbox_event_actions(
    *, event: InboxEvent, mismatch_ids: list[int] | None = None
) -> list[OperatorAction]:
    """The operator actions that named the event (replays, bulk replays, purges) or its
    mismatch evidence (marked investigated, evidence purged), oldest first."""
    if mismatch_ids is None:
        mismatch_ids = list(
            FingerprintMismatch.objects.filter(event=event).values_list("pk", flat=True)
        )
    base = OperatorAction.objects.all()
    pks = set(
        _json_list_contains(base, "event_ids", [event.pk]).values_list("pk", flat=True)
    )
    pks |= set(
        _json_list_contains(base, "details__mismatch_ids", mismatch_ids).values_list(
            "pk", flat=True
        )
    )
    return list(
        OperatorAction.objects.filter(pk__in=pks)
        .select_related("bulk_job")
        .order_by("created_at", "pk")[:STORY_MAX_PER_KIND]
    )


def attempt_round(*, attempt: InboxAttempt, replays: list[OperatorAction]) -> Round:
    """The round ``attempt`` belongs to: that of the latest of ``replays`` (oldest first)
    recorded before it started, else the first delivery's."""
    current = Round(number=1)
    for number, replay in enumerate(replays, start=2):
        if replay.created_at <= attempt.started_at:
            current = Round(number=number, replay=replay)
        else:
            break
    return current


def _no_product_note(event: InboxEvent) -> str:
    if event.processing_status == ProcessingStatus.DEAD_LETTERED:
        cause = event.get_dead_letter_cause_display() if event.dead_letter_cause else ""
        return "; ".join(part for part in (cause, event.error_message) if part)
    return event.error_message


def _results(
    event: InboxEvent,
    attempts: list[InboxAttempt],
    replays: list[OperatorAction],
    products: list[models.Model],
) -> list[StoryEntry]:
    """What each round came to, when it made no product: one entry per attempt that ended
    the round (dead-lettered, ignored, processed without a change), at the time that attempt
    finished and in its round, so that it follows its attempt, and a round's result stays
    told after a replay started the next. The current round's note is the event's own
    (the dead letter's cause and error), an earlier round's its attempt's error."""
    results: list[StoryEntry] = []
    current = attempts[-1] if attempts else None
    for attempt in attempts:
        status = attempt.resulting_status
        if status not in TERMINAL_STATUSES or attempt.finished_at is None:
            continue
        latest = attempt is current and status == event.processing_status
        if status == ProcessingStatus.PROCESSED and products and latest:
            continue  # its products tell it
        results.append(
            StoryEntry(
                at=attempt.finished_at,
                kind="no_product",
                record=attempt,
                round=attempt_round(attempt=attempt, replays=replays),
                note=_no_product_note(event) if latest else attempt.error,
                extra={"status": status},
            )
        )
    if (
        not products
        and event.processing_status in TERMINAL_STATUSES
        and (current is None or current.resulting_status != event.processing_status)
    ):
        # Terminal with no attempt that says so (rows from before attempts recorded their
        # status): the event's own result, after its last attempt.
        last = current.finished_at if current is not None else None
        results.append(
            StoryEntry(
                at=max(
                    (t for t in (event.processed_at, last) if t is not None),
                    default=event.last_seen_at,
                ),
                kind="no_product",
                note=_no_product_note(event),
                extra={"status": event.processing_status},
            )
        )
    return results


def inbox_event_story(*, event: InboxEvent) -> list[StoryEntry]:
    """Every entry of the event's story, oldest first (records of the same instant in the
    order the product makes them: delivery, evidence, operator action, attempt, result)."""
    entries: list[StoryEntry] = [
        StoryEntry(at=event.received_at, kind="delivery", record=event)
    ]
    if event.delivery_count > 1:
        entries.append(
            StoryEntry(
                at=event.last_seen_at,
                kind="duplicates",
                count=event.delivery_count - 1,
                last_at=event.last_seen_at,
            )
        )
    mismatches = list(
        FingerprintMismatch.objects.filter(event=event)
        .defer("raw_body", "headers")
        .order_by("received_at", "pk")[:STORY_MAX_PER_KIND]
    )
    for mismatch in mismatches:
        entries.append(
            StoryEntry(
                at=mismatch.received_at,
                kind="conflict",
                record=mismatch,
                count=mismatch.repeat_count,
                last_at=mismatch.last_seen_at,
            )
        )
    actions = inbox_event_actions(
        event=event, mismatch_ids=[mismatch.pk for mismatch in mismatches]
    )
    replays = [action for action in actions if action.action in REPLAY_ACTIONS]
    for action in actions:
        round_ = None
        if action in replays:
            round_ = Round(number=replays.index(action) + 2, replay=action)
        entries.append(
            StoryEntry(at=action.created_at, kind="action", record=action, round=round_)
        )
    attempts = list(
        InboxAttempt.objects.filter(event=event).order_by("started_at", "pk")[
            :STORY_MAX_PER_KIND
        ]
    )
    for attempt in attempts:
        entries.append(
            StoryEntry(
                at=attempt.started_at,
                kind="attempt",
                record=attempt,
                round=attempt_round(attempt=attempt, replays=replays),
            )
        )
    products = inbox_event_products(event=event)
    for product in products:
        entries.append(
            StoryEntry(
                at=getattr(product, "applied_at", None) or event.processed_at,
                kind="product",
                record=product,
            )
        )
    entries += _results(event, attempts, replays, products)
    if event.body_purged_at is not None:
        entries.append(StoryEntry(at=event.body_purged_at, kind="purge"))
    entries.sort(
        key=lambda entry: (
            entry.at is None,
            entry.at or event.received_at,
            _KIND_ORDER[entry.kind],
            entry.record.pk if entry.record is not None else 0,
        )
    )
    return entries
