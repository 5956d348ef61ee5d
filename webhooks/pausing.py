"""Pausing and resuming a source (docs/architecture.md, "Pausing a source"). Ingest never
reads any of this: a paused source answers every delivery as before, and no cached snapshot
of it needs to be forgotten."""

from __future__ import annotations

import logging

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from core.errors import InvalidPayload
from core.selectors import COUNT_CAP

from .errors import SourceAlreadyPaused, SourceNotPaused
from .models import OperatorAction, WebhookSource
from .selectors import webhook_source_held_count

logger = logging.getLogger(__name__)

_DRAIN_CLEARED = {
    "drain_started_at": None,
    "drain_rate": None,
    "drain_released": 0,
    "drain_tokens": 0,
    "drain_tokens_at": None,
}


def _held_details(source: WebhookSource) -> dict:
    held = webhook_source_held_count(source_id=source.pk)
    return {
        "source": source.slug,
        "source_id": source.pk,
        "held_events": min(held, COUNT_CAP),
        "held_events_capped": held > COUNT_CAP,
    }


def _actor_name(actor: AbstractBaseUser | None, actor_name: str) -> str:
    return actor_name or (actor.get_username() if actor is not None else "system")


@transaction.atomic
def webhook_source_pause(
    *,
    source: WebhookSource,
    reason: str,
    actor: AbstractBaseUser | None = None,
    actor_name: str = "",
) -> OperatorAction:
    """Pauses ``source``: its deliveries are verified, stored and answered as before, and its
    events wait unprocessed until ``webhook_source_resume``. A drain in progress stops: what
    it had not released waits again. Records the operator action (who, why, the source, how
    many of its events were waiting then) and returns it.

    Under the source's row lock: of two pauses at once, the second finds the source paused
    and raises ``SourceAlreadyPaused``, recording nothing. A blank reason is refused
    (``InvalidPayload``)."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidPayload("a reason is required", details={"reason": "required"})
    locked = WebhookSource.objects.select_for_update(no_key=True).get(pk=source.pk)
    if locked.paused_at is not None:
        raise SourceAlreadyPaused(
            f"webhook source {locked.slug!r} is already paused "
            f"(since {locked.paused_at.isoformat()} by {locked.paused_by_name})"
        )
    now = timezone.now()
    name = _actor_name(actor, actor_name)
    changes = {
        "paused_at": now,
        "paused_by": actor,
        "paused_by_name": name,
        "pause_reason": reason,
        **_DRAIN_CLEARED,
    }
    WebhookSource.objects.filter(pk=source.pk).update(**changes, updated_at=now)
    for field, value in changes.items():
        setattr(source, field, value)
    details = _held_details(locked)
    if locked.drain_started_at is not None:
        details["drain_interrupted"] = True
    action = OperatorAction.objects.create(
        action=OperatorAction.Action.PAUSE_SOURCE,
        actor=actor,
        actor_name=name,
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
    *,
    source: WebhookSource,
    rate: float | None = None,
    actor: AbstractBaseUser | None = None,
    actor_name: str = "",
    reason: str = "",
) -> OperatorAction:
    """Resumes a paused ``source``: its held events drain in id order (the order the relay
    would have claimed them), at most ``rate`` a second if given, new deliveries queueing
    behind them; once none waits the source is normal again. Records the operator action
    (who, the source, how many events were held, the rate) and returns it.

    Under the source's row lock: of two resumes at once, the second finds the source not
    paused and raises ``SourceNotPaused``, recording nothing. A rate that is not a number
    above 0 is refused (``InvalidPayload``)."""
    if rate is not None and not (isinstance(rate, int | float) and 0 < rate < 1e9):
        raise InvalidPayload(
            "the rate must be a number above 0", details={"rate": "must be > 0"}
        )
    locked = WebhookSource.objects.select_for_update(no_key=True).get(pk=source.pk)
    if locked.paused_at is None:
        draining = (
            f" (draining since {locked.drain_started_at.isoformat()})"
            if locked.drain_started_at is not None
            else ""
        )
        raise SourceNotPaused(f"webhook source {locked.slug!r} is not paused{draining}")
    now = timezone.now()
    name = _actor_name(actor, actor_name)
    details = {
        **_held_details(locked),
        "rate": float(rate) if rate is not None else None,
        "paused_at": locked.paused_at.isoformat(),
        "paused_by": locked.paused_by_name,
        "pause_reason": locked.pause_reason,
    }
    changes = {
        "paused_at": None,
        "paused_by": None,
        "paused_by_name": "",
        "pause_reason": "",
        **_DRAIN_CLEARED,
        "drain_started_at": now,
        "drain_rate": float(rate) if rate is not None else None,
        # The first held event goes at once, the next ones at the rate.
        "drain_tokens": 1.0,
        "drain_tokens_at": now,
    }
    WebhookSource.objects.filter(pk=source.pk).update(**changes, updated_at=now)
    for field, value in changes.items():
        setattr(source, field, value)
    action = OperatorAction.objects.create(
        action=OperatorAction.Action.RESUME_SOURCE,
        actor=actor,
        actor_name=name,
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
