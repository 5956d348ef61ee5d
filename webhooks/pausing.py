"""Pausing and resuming a source (docs/subsystems/relay.md, "Pausing a source").

A held source has one ``SourceHold`` row: paused (by an operator), then draining (after the
resume) until the relays have released every event it held, when the row is deleted. The
pause, the resume and each drain round lock that row only. Ingest never reads or references
it: a paused source answers every delivery as before, and no cached snapshot of it needs to be
forgotten.

What the relay does with a held source (setting its rows aside, releasing them in order at the
drain's rate) is in ``webhooks.outbox``; this module holds the rules it applies: the drain's
budget (``drain_budget``), its end (``drain_end``), and whether a worker may take a row of a
held source (``inbox_event_held``)."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.actors import Actor
from core.errors import InvalidPayload
from core.selectors import COUNT_CAP
from trail.models import OperatorAction
from trail.services import (
    HeldDetails,
    PauseSourceDetails,
    ResumeSourceDetails,
    operator_action_record,
)

from .errors import SourceAlreadyPaused, SourceNotPaused
from .models import InboxEvent, SourceHold, WebhookSource
from .selectors import webhook_source_held_count

logger = logging.getLogger(__name__)

# A drain at a rate keeps at most this much time's worth of tokens (at least one): after a
# wait (a relay that was away, documents waiting for their earlier events) at most a tenth
# of a second's worth of events goes at once, so that no second sees more than the rate
# and that tenth. The relay comes round far more often while it drains (every
# RELAY_IDLE_POLL_SECONDS at most when it releases nothing), so the rate is still reached.
DRAIN_BURST_SECONDS = 0.1


def _held_counts(source: WebhookSource) -> HeldDetails:
    held = webhook_source_held_count(source_id=source.pk)
    return HeldDetails(
        source=source.slug,
        source_id=source.pk,
        held_events=min(held, COUNT_CAP),
        held_events_capped=held > COUNT_CAP,
    )


def _hold_locked(source: WebhookSource) -> SourceHold | None:
    return SourceHold.objects.select_for_update().filter(source=source).first()


@transaction.atomic
def webhook_source_pause(
    *, source: WebhookSource, reason: str, actor: Actor
) -> OperatorAction:
    """Pauses ``source``: its deliveries are verified, stored and answered as before, and its
    events wait unprocessed until ``webhook_source_resume``. A drain in progress stops: what
    it had not released waits again. Records the operator action (who, why, the source, how
    many of its events were waiting then) and returns it.

    Of two pauses at once, one creates the source's hold (its primary key is the source) and
    the other finds the source paused and raises ``SourceAlreadyPaused``, recording nothing.
    A blank reason is refused (``InvalidPayload``)."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidPayload("a reason is required", details={"reason": "required"})
    now = timezone.now()
    paused = {"paused_at": now, **actor.columns("paused_by"), "pause_reason": reason}
    hold = _hold_locked(source)
    if hold is not None and hold.paused_at is not None:
        raise SourceAlreadyPaused(
            f"webhook source {source.slug!r} is already paused "
            f"(since {hold.paused_at.isoformat()} by {hold.paused_by_name})"
        )
    drain_interrupted = hold is not None
    if hold is None:
        try:
            with transaction.atomic():
                SourceHold.objects.create(source=source, **paused)
        except IntegrityError:  # a pause at the same time created it first
            raise SourceAlreadyPaused(
                f"webhook source {source.slug!r} is already paused"
            ) from None
    else:
        SourceHold.objects.filter(pk=hold.pk).update(
            **paused,
            drain_started_at=None,
            drain_rate=None,
            drain_released=0,
            drain_tokens=0,
            drain_tokens_at=None,
        )
    details = PauseSourceDetails(**_held_counts(source))
    if drain_interrupted:
        details["drain_interrupted"] = True
    action = operator_action_record(
        action=OperatorAction.Action.PAUSE_SOURCE,
        actor=actor,
        reason=reason,
        details=details,
    )
    logger.info(
        "webhook_source.paused",
        extra={"source": source.slug, "held_events": details["held_events"]},
    )
    return action


@transaction.atomic
def webhook_source_resume(
    *, source: WebhookSource, actor: Actor, rate: float | None = None, reason: str = ""
) -> OperatorAction:
    """Resumes a paused ``source``: its held events drain in id order (the order the relay
    would have claimed them), at most ``rate`` a second if given (each event one token), a
    document's next event waiting for its earlier one to finish, new deliveries queueing
    behind them; once none waits the source is normal again. Records the operator action
    (who, the source, how many events were held, the rate) and returns it.

    Under the hold's row lock: of two resumes at once, the second finds the source not
    paused and raises ``SourceNotPaused``, recording nothing. A rate that is not a number
    above 0 is refused (``InvalidPayload``)."""
    if rate is not None and not (isinstance(rate, int | float) and 0 < rate < 1e9):
        raise InvalidPayload(
            "the rate must be a number above 0", details={"rate": "must be > 0"}
        )
    hold = _hold_locked(source)
    if hold is None or hold.paused_at is None:
        draining = (
            f" (draining since {hold.drain_started_at.isoformat()})"
            if hold is not None and hold.drain_started_at is not None
            else ""
        )
        raise SourceNotPaused(f"webhook source {source.slug!r} is not paused{draining}")
    now = timezone.now()
    details = ResumeSourceDetails(
        **_held_counts(source),
        rate=float(rate) if rate is not None else None,
        paused_at=hold.paused_at.isoformat(),
        paused_by=hold.paused_by_name,
        pause_reason=hold.pause_reason,
    )
    SourceHold.objects.filter(pk=hold.pk).update(
        paused_at=None,
        paused_by=None,
        paused_by_name="",
        pause_reason="",
        drain_started_at=now,
        drain_rate=details["rate"],
        drain_released=0,
        # The first held event goes at once, the next ones at the rate.
        drain_tokens=1.0,
        drain_tokens_at=now,
    )
    action = operator_action_record(
        action=OperatorAction.Action.RESUME_SOURCE,
        actor=actor,
        reason=reason.strip(),
        details=details,
    )
    logger.info(
        "webhook_source.resumed",
        extra={
            "source": source.slug,
            "held_events": details["held_events"],
            "rate": details["rate"],
        },
    )
    return action


def drain_budget(hold: SourceHold, *, now: datetime, limit: int) -> tuple[int, float]:
    """How many held rows a draining source may release now, and the tokens its bucket holds
    before they go: ``drain_rate`` tokens a second since ``drain_tokens_at``, at most
    ``DRAIN_BURST_SECONDS`` worth (at least one). Each released event spends one token: the
    bucket never goes below zero. No rate: ``limit``."""
    if hold.drain_rate is None:
        return limit, 0.0
    ceiling = max(1.0, hold.drain_rate * DRAIN_BURST_SECONDS)
    elapsed = 0.0
    if hold.drain_tokens_at is not None:
        elapsed = max((now - hold.drain_tokens_at).total_seconds(), 0.0)
    tokens = min(ceiling, hold.drain_tokens + hold.drain_rate * elapsed)
    return min(int(tokens), limit), tokens


def drain_end(hold: SourceHold) -> None:
    """The drain released everything its source held: the source is normal again. Called
    under the hold's row lock."""
    SourceHold.objects.filter(pk=hold.pk, drain_started_at__isnull=False).delete()
    logger.info(
        "webhook_source.drained",
        extra={"source_id": hold.pk, "released": hold.drain_released},
    )


def inbox_event_held(event: InboxEvent, hold: SourceHold | None) -> bool:
    """Whether a worker must leave the row alone: its source is paused, or draining and this
    row not released yet (the drain stamps what it releases dispatched at or after its
    start)."""
    if hold is None:
        return False
    if hold.paused_at is not None:
        return True
    return hold.drain_started_at is not None and (
        event.dispatched_at is None or event.dispatched_at < hold.drain_started_at
    )
