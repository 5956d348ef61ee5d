"""Writes. Functions with keyword-only, typed arguments: <entity>_<action>."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from core.errors import InvalidPayload
from core.selectors import COUNT_CAP

from .envelopes import Envelope, body_parse
from .errors import (
    InconsistentDuplicate,
    InvalidSignature,
    SourceAlreadyPaused,
    SourceNotPaused,
    StaleTimestamp,
)
from .integrations import integration_get
from .metrics import (
    WEBHOOK_DUPLICATES,
    WEBHOOK_INCONSISTENT_DUPLICATES,
    WEBHOOK_SIGNATURE_FAILURES,
)
from .models import (
    FingerprintMismatch,
    InboxEvent,
    OperatorAction,
    ProcessingStatus,
    SignatureFailure,
    WebhookSecret,
    WebhookSource,
)
from .schemes import REASON_MISMATCH, scheme_get
from .selectors import (
    webhook_secrets_valid,
    webhook_source_held_count,
    webhook_source_snapshot_forget,
)

logger = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 86400
SIGNATURE_PREFIX_LENGTH = 12
# Headers kept on the inbox row (lower-case). Signatures are shortened to a prefix.
STORED_HEADERS = (
    "content-type",
    "user-agent",
    "x-webhook-id",
    "x-webhook-timestamp",
    "webhook-id",
    "webhook-timestamp",
    "x-github-delivery",
    "x-github-event",
    "x-github-hook-id",
    "x-github-hook-installation-target-type",
    "x-github-hook-installation-target-id",
)
SIGNATURE_HEADERS = ("x-webhook-signature", "webhook-signature", "x-hub-signature-256")


# --- sources and secrets --------------------------------------------------------------------


def _snapshot_forget(slug: str) -> None:
    """This process stops using its snapshot of the source at once, and again once the
    change has committed (a request in between may have read the old state). Other processes
    see the change within ``WEBHOOK_SOURCE_CACHE_SECONDS``."""
    webhook_source_snapshot_forget(slug=slug)
    transaction.on_commit(lambda: webhook_source_snapshot_forget(slug=slug))


# Every local of these services and of what they call is hidden from error reports and debug
# pages (docs/security.md, "No secrets in error reports"): they hold the secret.
@sensitive_variables()
@transaction.atomic
def webhook_source_create(
    *, slug: str, scheme: str, handler: str, secret: str | None = None
) -> tuple[WebhookSource, str]:
    """Creates a source with one secret; returns the source and the secret (not shown again)."""
    signer = scheme_get(scheme)
    secret = secret or signer.secret_generate()
    signer.secret_validate(secret)
    source = WebhookSource(slug=slug, scheme=scheme, handler=handler)
    source.full_clean(validate_constraints=False)
    source.save()
    WebhookSecret.objects.create(source=source, secret=secret)
    logger.info(
        "webhook_source.created",
        extra={"source": slug, "scheme": scheme, "handler": handler},
    )
    return source, secret


@sensitive_variables()
@transaction.atomic
def webhook_source_rotate(
    *,
    source: WebhookSource,
    secret: str | None = None,
    grace_seconds: int = DEFAULT_GRACE_SECONDS,
    actor: AbstractBaseUser | None = None,
    actor_name: str = "",
    reason: str = "",
) -> str:
    """Adds a new secret that signs from now on; the secrets valid until now stay valid for
    ``grace_seconds`` more (an earlier expiry is kept). Records who rotated and why as an
    operator action, never the secret. Returns the new secret.

    The source's row is locked for the rotation: two rotations at once run one after the
    other, so the second one limits the first one's new secret to its grace period too."""
    signer = scheme_get(source.scheme)
    secret = secret or signer.secret_generate()
    signer.secret_validate(secret)
    WebhookSource.objects.select_for_update().filter(pk=source.pk).first()
    now = timezone.now()
    grace_end = now + timedelta(seconds=max(grace_seconds, 0))
    WebhookSecret.objects.filter(source=source).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=grace_end)
    ).update(expires_at=grace_end)
    WebhookSecret.objects.create(source=source, secret=secret, created_at=now)
    OperatorAction.objects.create(
        action=OperatorAction.Action.ROTATE_SECRET,
        actor=actor,
        actor_name=actor_name or (actor.get_username() if actor else "system"),
        reason=reason,
        details={"source": source.slug, "grace_seconds": grace_seconds},
    )
    _snapshot_forget(source.slug)
    logger.info(
        "webhook_source.rotated",
        extra={"source": source.slug, "grace_seconds": grace_seconds},
    )
    return secret


def webhook_source_set_enabled(*, source: WebhookSource, enabled: bool) -> None:
    WebhookSource.objects.filter(pk=source.pk).update(
        is_enabled=enabled, updated_at=timezone.now()
    )
    _snapshot_forget(source.slug)
    logger.info(
        "webhook_source.enabled" if enabled else "webhook_source.disabled",
        extra={"source": source.slug},
    )


def webhook_source_expected_interval_set(
    *, source: WebhookSource, seconds: int | None
) -> None:
    """Sets how long the source normally goes without a new event (``None``: no
    expectation). Only the "no delivery" alert reads it, through /metrics."""
    WebhookSource.objects.filter(pk=source.pk).update(
        expected_delivery_interval_seconds=seconds, updated_at=timezone.now()
    )
    source.expected_delivery_interval_seconds = seconds
    logger.info(
        "webhook_source.expected_interval_set",
        extra={"source": source.slug, "expected_delivery_interval_seconds": seconds},
    )


# --- pausing --------------------------------------------------------------------------------
# docs/architecture.md, "Pausing a source". Ingest never reads any of this: a paused source
# answers every delivery as before, and no cached snapshot of it needs to be forgotten.

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


# --- ingest ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestResult:
    inbox_event_id: int
    event_id: str
    created: bool
    processing_status: str


def _stored_headers(headers: Mapping[str, str]) -> dict[str, str]:
    stored = {}
    for name in STORED_HEADERS:
        value = headers.get(name)
        if value:
            stored[name] = value[:255].replace("\x00", "")
    for name in SIGNATURE_HEADERS:
        value = headers.get(name)
        if value:
            stored[name] = value[:SIGNATURE_PREFIX_LENGTH].replace("\x00", "") + "..."
    return stored


def signature_failure_record(
    *, source: WebhookSource, reason: str, remote_addr: str | None
) -> None:
    """Counts a failed authentication: one upsert of the (source, reason, minute) counter, the
    bounded write an unauthenticated request may cost. Never the body or the signature."""
    WEBHOOK_SIGNATURE_FAILURES.labels(source=source.slug, reason=reason).inc()
    logger.warning(
        "inbox.signature_failed",
        extra={"source": source.slug, "reason": reason, "remote_addr": remote_addr},
    )
    now = timezone.now()
    table = connection.ops.quote_name(SignatureFailure._meta.db_table)
    window = now.replace(second=0, microsecond=0)
    field = SignatureFailure._meta.get_field
    params = [
        source.pk,
        reason,
        field("window_start").get_db_prep_save(window, connection),
        1,
        field("last_remote_addr").get_db_prep_save(remote_addr, connection),
        field("last_seen_at").get_db_prep_save(now, connection),
    ]
    sql = (
        f"INSERT INTO {table} (source_id, reason, window_start, count, last_remote_addr,"  # noqa: S608
        " last_seen_at) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (source_id, reason, window_start) DO UPDATE SET"
        f" count = {table}.count + 1, last_remote_addr = EXCLUDED.last_remote_addr,"
        " last_seen_at = EXCLUDED.last_seen_at"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _timestamp_check(*, timestamp: str | None, tolerance: int) -> None:
    if timestamp is None:  # the scheme has no timestamp (github)
        return
    try:
        value = int(timestamp)
    except ValueError as exc:
        raise StaleTimestamp() from exc
    # Integer arithmetic: a signed timestamp of 400 digits must not overflow a float.
    if abs(int(timezone.now().timestamp()) - value) > tolerance:
        raise StaleTimestamp()


# The columns an accepted delivery fills, bound as parameters; of these, the ones whose Python
# value the database driver cannot take as it is (instants on SQLite, JSON) go through their
# field's adaptation.
_INBOX_COLUMNS = (
    "source_id",
    "event_id",
    "event_type",
    "entity_id",
    "entity_type",
    "source_version",
    "occurred_at",
    "tenant_id",
    "idempotency_key",
    "payload_hash",
    "content_fingerprint",
    "body_key",
    "raw_body",
    "headers",
    "remote_addr",
    "received_at",
    "last_seen_at",
)
_ADAPTED_COLUMNS = ("occurred_at", "headers", "received_at", "last_seen_at")
# And the ones every new row starts with, written into the statement.
_INBOX_CONSTANTS = {
    "signature_valid": "TRUE",
    "processing_status": f"'{ProcessingStatus.RECEIVED}'",
    "http_status": "202",
    "error_message": "''",
    "attempts": "0",
    "delivery_count": "1",
}


@functools.cache
def _inbox_upsert_sql(vendor: str, *, on: str) -> str:
    """The one statement that records a delivery, on the unique index ``on`` names.

    ``on="event_id"``: new / duplicate / conflict by ``(source, event_id)``. A new row comes
    back with delivery_count 1; a true duplicate (same fingerprint) is counted and comes back
    with delivery_count > 1; a conflicting fingerprint updates nothing and returns no row.

    ``on="body"``: for events whose id is not signed, by ``(source, body_key)``: the same
    signed bytes are the same event whatever id they came with, counted on the stored row,
    whose event id comes back. The same id with other bytes violates ``(source, event_id)``
    instead and raises ``IntegrityError``, for the caller to record as above.

    Either way the unique index decides races. Valid on PostgreSQL and on SQLite >= 3.35."""
    quote = connection.ops.quote_name
    table = quote(InboxEvent._meta.db_table)
    columns = ", ".join(quote(name) for name in (*_INBOX_COLUMNS, *_INBOX_CONSTANTS))
    placeholders = ", ".join(
        ["%s"] * len(_INBOX_COLUMNS) + list(_INBOX_CONSTANTS.values())
    )
    if on == "event_id":
        target = "(source_id, event_id)"
        condition = f" WHERE {table}.content_fingerprint = EXCLUDED.content_fingerprint"
    else:
        target = "(source_id, body_key) WHERE body_key IS NOT NULL"
        condition = ""
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"  # noqa: S608
        f" ON CONFLICT {target} DO UPDATE SET"
        f" delivery_count = {table}.delivery_count + 1,"
        f" last_seen_at = EXCLUDED.last_seen_at{condition}"
        " RETURNING id, event_id, delivery_count, processing_status"
    )


def _upsert_execute(sql: str, params: list) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _inbox_upsert_execute(*, params: list, by_body: bool) -> tuple | None:
    """The row the upsert returned: ``(id, event_id, delivery_count, processing_status)``,
    or ``None`` for a conflicting fingerprint under an existing event id."""
    vendor = connection.vendor
    if not by_body:
        return _upsert_execute(_inbox_upsert_sql(vendor, on="event_id"), params)
    # Inside a caller's transaction the attempt runs in a savepoint, so that a violation of
    # the event id index leaves that transaction usable; in autocommit (the webhook view) a
    # failed statement leaves nothing behind and needs none.
    attempt = (
        transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    )
    try:
        with attempt:
            return _upsert_execute(_inbox_upsert_sql(vendor, on="body"), params)
    except IntegrityError:
        # Another body under a stored event id: a conflict, or (for a fingerprint that
        # ignores some bytes) a true duplicate. Rows are never deleted, so this one
        # conflicts on the event id and inserts nothing.
        return _upsert_execute(_inbox_upsert_sql(vendor, on="event_id"), params)


def inbox_event_record(
    *,
    source: WebhookSource,
    raw_body: bytes,
    headers: Mapping[str, str],
    remote_addr: str | None = None,
    secrets: Sequence[str] | None = None,
    secrets_reload: Callable[[], Sequence[str]] | None = None,
) -> IngestResult:
    """Verifies, validates and records one delivery. Idempotent per (source, event_id): the
    first delivery creates the row, which a relay publishes once committed; a delivery
    with the same content fingerprint only counts (``delivery_count``); one with another
    fingerprint leaves the original untouched, keeps the evidence and raises
    ``InconsistentDuplicate``. When the event id is not signed, idempotent per (source, body)
    as well: the stored body under another id only counts on the stored row, and the result
    names the stored event id. Raises ``InvalidSignature``, ``StaleTimestamp``, ``InvalidJson``
    or ``InvalidPayload`` before anything is written (failed authentication is counted).
    ``secrets`` are the source's valid secrets when the caller already loaded them (possibly
    a while ago: ``secrets_reload`` then gives them as stored now, tried once when none of
    ``secrets`` verifies the signature)."""
    scheme = scheme_get(source.scheme)
    if secrets is None:
        secrets = webhook_secrets_valid(source=source)
    try:
        try:
            verified = scheme.verify(
                raw_body=raw_body, headers=headers, secrets=secrets
            )
        except InvalidSignature as exc:
            if secrets_reload is None or exc.reason != REASON_MISMATCH:
                raise
            verified = scheme.verify(
                raw_body=raw_body, headers=headers, secrets=secrets_reload()
            )
        tolerance = source.timestamp_tolerance_seconds
        if tolerance is None:
            tolerance = settings.WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS
        _timestamp_check(timestamp=verified.timestamp, tolerance=tolerance)
    except (InvalidSignature, StaleTimestamp) as exc:
        signature_failure_record(
            source=source, reason=exc.reason, remote_addr=remote_addr
        )
        raise

    body = body_parse(raw_body)
    envelope = integration_get(source.handler).envelope(
        body=body, raw_body=raw_body, headers=headers, verified=verified
    )
    return _inbox_upsert(
        source=source,
        envelope=envelope,
        raw_body=raw_body,
        headers=headers,
        remote_addr=remote_addr,
    )


def _inbox_upsert(
    *,
    source: WebhookSource,
    envelope: Envelope,
    raw_body: bytes,
    headers: Mapping[str, str],
    remote_addr: str | None,
) -> IngestResult:
    now = timezone.now()
    stored_headers = _stored_headers(headers)
    payload_hash = hashlib.sha256(raw_body).hexdigest()
    body_key = None if envelope.event_id_signed else payload_hash
    values = {
        "source_id": source.pk,
        "event_id": envelope.event_id,
        "event_type": envelope.event_type,
        "entity_id": envelope.entity_id,
        "entity_type": envelope.entity_type,
        "source_version": envelope.source_version,
        "occurred_at": envelope.occurred_at,
        "tenant_id": envelope.tenant_id,
        "idempotency_key": envelope.idempotency_key,
        "payload_hash": payload_hash,
        "content_fingerprint": envelope.content_fingerprint,
        "body_key": body_key,
        "raw_body": raw_body,
        "headers": stored_headers,
        "remote_addr": remote_addr,
        "received_at": now,
        "last_seen_at": now,
    }
    field = InboxEvent._meta.get_field
    for name in _ADAPTED_COLUMNS:
        values[name] = field(name).get_db_prep_save(values[name], connection)
    params = [values[name] for name in _INBOX_COLUMNS]
    log_extra = {"source": source.slug, "event_id": envelope.event_id}
    # One statement in autocommit is its own transaction: when execute() returns, the row is
    # committed, and the answer may say so. Nothing here talks to the broker: the relay of a
    # worker publishes the new row (``webhooks.outbox``).
    row = _inbox_upsert_execute(params=params, by_body=body_key is not None)
    if row is None:
        with transaction.atomic():
            original = (
                InboxEvent.objects.filter(source=source, event_id=envelope.event_id)
                .only("id", "content_fingerprint")
                .get()
            )
            FingerprintMismatch.objects.create(
                event=original,
                raw_body=raw_body,
                headers=stored_headers,
                original_fingerprint=original.content_fingerprint,
                conflicting_fingerprint=envelope.content_fingerprint,
                conflicting_payload_hash=payload_hash,
                remote_addr=remote_addr,
                received_at=now,
            )
    else:
        inbox_event_id, event_id, delivery_count, processing_status = row
        created = delivery_count == 1
    if row is None:
        WEBHOOK_INCONSISTENT_DUPLICATES.inc()
        logger.warning("inbox.inconsistent_duplicate", extra=log_extra)
        raise InconsistentDuplicate(event_id=envelope.event_id)
    if created:
        logger.info("inbox.accepted", extra=log_extra)
    elif event_id != envelope.event_id:
        # A stored body under a fresh id: GitHub's own redeliveries keep their id, so this
        # is a copy made by someone holding the signed body.
        WEBHOOK_DUPLICATES.inc()
        logger.warning(
            "inbox.duplicate",
            extra={**log_extra, "event_id": event_id, "delivery_id": envelope.event_id},
        )
    else:
        WEBHOOK_DUPLICATES.inc()
        logger.info("inbox.duplicate", extra=log_extra)
    return IngestResult(
        inbox_event_id=inbox_event_id,
        event_id=event_id,
        created=created,
        processing_status=processing_status,
    )


# --- investigations -------------------------------------------------------------------------


def fingerprint_mismatches_mark_investigated(
    *, mismatches: QuerySet[FingerprintMismatch], actor: AbstractBaseUser, note: str
) -> OperatorAction:
    """Marks the open mismatches investigated with the note and records one operator action."""
    now = timezone.now()
    with transaction.atomic():
        rows = list(
            FingerprintMismatch.objects.filter(
                pk__in=list(mismatches.values_list("pk", flat=True)),
                investigated_at__isnull=True,
            )
            .select_for_update()
            .order_by("pk")
        )
        ids = [row.pk for row in rows]
        FingerprintMismatch.objects.filter(pk__in=ids).update(
            investigated_at=now, investigated_by=actor, investigation_note=note
        )
        return OperatorAction.objects.create(
            action=OperatorAction.Action.MARK_INVESTIGATED,
            actor=actor,
            actor_name=actor.get_username(),
            reason=note,
            event_ids=sorted({row.event_id for row in rows}),
            event_count=len(ids),
            details={"mismatch_ids": ids},
        )
