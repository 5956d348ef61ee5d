"""Ingest: one delivery verified, validated and recorded with one statement
(docs/subsystems/inbox.md, "A webhook delivery"). Failed authentication costs one bounded counter
write; nothing here talks to the broker: a relay publishes the new row."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.conf import settings
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from core.db import fetchone_checking_connection
from core.errors import TemporarilyUnavailable
from core.tracing import traceparent_current, tracing_enabled

from . import statements
from .envelopes import Envelope, body_parse
from .errors import (
    InconsistentDuplicate,
    InvalidSignature,
    SignatureFailureReason,
    StaleTimestamp,
)
from .integrations import integration_get, integration_names
from .metrics import (
    WEBHOOK_DUPLICATES,
    WEBHOOK_INCONSISTENT_DUPLICATES,
    WEBHOOK_SIGNATURE_FAILURES,
)
from .models import (
    FingerprintMismatch,
    InboxKey,
    ProcessingStatus,
    SignatureFailure,
    WebhookSource,
)
from .schemes import scheme_get, schemes
from .selectors import webhook_secrets_valid

logger = logging.getLogger(__name__)

SIGNATURE_PREFIX_LENGTH = 12
# Kept on the inbox row (lower-case) whatever the source, beside the headers its scheme and
# integration declare (``stored_header_names``).
GENERIC_STORED_HEADERS = ("content-type", "user-agent")


@functools.cache
def stored_header_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The headers kept on the inbox row (lower-case): the generic ones, every registered
    scheme's id and timestamp headers and every integration's own; and the signature headers,
    kept shortened to a prefix. Derived from the registries (``WEBHOOK_SCHEMES``,
    ``WEBHOOK_INTEGRATIONS``) once per process."""
    names = list(GENERIC_STORED_HEADERS)
    signatures = []
    for scheme in schemes().values():
        names += [scheme.id_header, scheme.timestamp_header or ""]
        signatures.append(scheme.signature_header)
    for name in integration_names():
        names += list(integration_get(name).headers)
    kept = tuple(dict.fromkeys(n.lower() for n in names if n))
    return kept, tuple(dict.fromkeys(n.lower() for n in signatures))


@dataclass(frozen=True)
class IngestResult:
    inbox_event_id: int
    event_id: str
    created: bool
    processing_status: str


def _stored_headers(headers: Mapping[str, str]) -> dict[str, str]:
    stored = {}
    kept, signatures = stored_header_names()
    for name in kept:
        value = headers.get(name)
        if value:
            stored[name] = value[:255].replace("\x00", "")
    for name in signatures:
        value = headers.get(name)
        if value:
            stored[name] = value[:SIGNATURE_PREFIX_LENGTH].replace("\x00", "") + "..."
    return stored


def _db_value(model: type[models.Model], name: str, value: Any) -> Any:
    """``value`` as the field ``name`` of ``model`` hands it to the database driver (instants
    on SQLite, JSON): for the statements written by hand."""
    field = cast(models.Field, model._meta.get_field(name))
    return field.get_db_prep_save(value, connection)


def _inbox_db_values(values: dict[str, Any]) -> None:
    """``_db_value`` for the inbox row's adapted columns (``statements.inbox_adapted_fields``),
    in place, per delivery: the instants and the JSON go straight to the backend's adapters,
    which is what the fields' own preparation ends with for an aware instant and a dict (a
    naive instant, which the field warns about and makes aware, takes the field's whole
    way). The connection's operations are looked up once for all of them."""
    ops = connection.ops
    for field in statements.inbox_adapted_fields(tuple(values)):
        name, value = field.attname, values[field.attname]
        if isinstance(field, models.JSONField) and isinstance(value, dict):
            values[name] = ops.adapt_json_value(value, field.encoder)
        elif isinstance(field, models.DateTimeField) and (
            value is None or (isinstance(value, datetime) and timezone.is_aware(value))
        ):
            values[name] = ops.adapt_datetimefield_value(value)
        else:
            values[name] = field.get_db_prep_save(value, connection)


def signature_failure_record(
    *, source: WebhookSource, reason: SignatureFailureReason, remote_addr: str | None
) -> None:
    """Counts a failed authentication: one upsert of the (source, reason, minute) counter, the
    bounded write an unauthenticated request may cost. Never the body or the signature."""
    WEBHOOK_SIGNATURE_FAILURES.labels(source=source.slug, reason=reason).inc()
    logger.warning(
        "inbox.signature_failed",
        extra={"source": source.slug, "reason": reason, "remote_addr": remote_addr},
    )
    now = timezone.now()
    window = now.replace(second=0, microsecond=0)
    params = [
        source.pk,
        reason,
        _db_value(SignatureFailure, "window_start", window),
        1,
        _db_value(SignatureFailure, "last_remote_addr", remote_addr),
        _db_value(SignatureFailure, "last_seen_at", now),
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            statements.signature_failure_upsert_sql(connection.vendor), params
        )


def _timestamp_check(*, timestamp: str | None, tolerance: int) -> None:
    if timestamp is None:  # the scheme has no timestamp
        return
    try:
        value = int(timestamp)
    except ValueError as exc:
        raise StaleTimestamp() from exc
    # Integer arithmetic: a signed timestamp of 400 digits must not overflow a float.
    if abs(int(timezone.now().timestamp()) - value) > tolerance:
        raise StaleTimestamp()


def _upsert_execute(sql: str, params: list) -> tuple | None:
    # An upsert may run twice: as a request's first statement it stands in for the
    # connection's health check (``core.db``).
    return fetchone_checking_connection(sql, params)


def _record_execute(*, values: dict[str, Any], on: str) -> tuple | None:
    """One delivery recorded on the ledger's unique index ``on``: ``(id, event_id,
    delivery_count, processing_status)``, or ``None`` for a conflicting fingerprint under
    an existing event id (``statements.inbox_record_sql``). On PostgreSQL one statement; on
    SQLite (the embedded default, whose IMMEDIATE transactions take its one write lock up
    front) the same steps as three, in one transaction."""
    vendor, given = connection.vendor, tuple(values)
    if vendor == "postgresql":
        sql = statements.inbox_record_sql(
            vendor,
            on=on,
            given=given,
            days=statements.recent_days(values["received_at"]),
        )
        try:
            row = _upsert_execute(sql, statements.inbox_record_params(values))
        except IntegrityError as exc:
            if not _partition_missing(exc):
                raise
            # Nothing was written (the key went with the statement): the producer retries
            # once the periodic work has created the day's partition.
            logger.error(
                "inbox.partition_missing",
                extra={
                    "source_id": values["source_id"],
                    "event_id": values["event_id"],
                },
            )
            raise TemporarilyUnavailable() from exc
    else:
        with transaction.atomic():
            row = _record_execute_in_steps(values=values, on=on)
    if row is None:
        return None
    if row[3] is None:
        # A duplicate whose row the statement did not see: its first delivery committed
        # while the ledger made this one wait, it was received before the days the
        # statement counts in (``statements.recent_days``), or it has left the inbox.
        with connection.cursor() as cursor:
            cursor.execute(
                statements.inbox_duplicate_count_sql(vendor),
                [row[2], values["last_seen_at"], row[0], row[4]],
            )
            status = cursor.fetchone()
        if status is None:
            # The row left with its day's partition (retention): its key says how it
            # ended, blank for ``processed``.
            final = (
                InboxKey.objects.filter(pk=row[0])
                .values_list("final_status", flat=True)
                .first()
            )
            status = (final or ProcessingStatus.PROCESSED,)
        return (*row[:3], status[0])
    return row[:4]


def _partition_missing(exc: IntegrityError) -> bool:
    """The row's day has no time partition (docs/scaling.md, "Time partitions of the
    inbox"): PostgreSQL's check violation of a partitioned table, or of the bound that
    migration 0031 checks on the table it partitions, past which a run that stopped before
    its swap refuses rows ("Partitioning an existing inbox"); not a unique key's."""
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) != "23514":
        return False
    constraint = getattr(getattr(cause, "diag", None), "constraint_name", None) or ""
    return "no partition of relation" in str(cause) or constraint.endswith("_p0_bound")


def _record_execute_in_steps(*, values: dict[str, Any], on: str) -> tuple | None:
    vendor = connection.vendor
    with connection.cursor() as cursor:
        cursor.execute(
            statements.key_count_sql(vendor, on=on),
            statements.key_count_params(values, on=on),
        )
        counted = cursor.fetchone()
        if counted is not None:
            return (*counted[:3], None, counted[3])
        try:
            with transaction.atomic():
                cursor.execute(
                    statements.inbox_insert_sql(vendor, given=tuple(values)),
                    statements.inbox_insert_params(values),
                )
                inbox_event_id, status = cursor.fetchone()
                cursor.execute(
                    statements.key_insert_sql(vendor),
                    [inbox_event_id, *statements.key_params(values)],
                )
        except IntegrityError:
            if on == "body":
                raise  # the event id is taken: the caller records it by its id
            return None  # the event id is taken with another fingerprint: a conflict
    return (inbox_event_id, values["event_id"], 1, status, values["received_at"])


def _inbox_record_execute(*, values: dict[str, Any], by_body: bool) -> tuple | None:
    """The row recorded for a delivery's (adapted) ``values`` (``_record_execute``), by its
    body when its event id is not signed."""
    if not by_body:
        return _record_execute(values=values, on="event_id")
    # Inside a caller's transaction the attempt runs in a savepoint, so that a violation of
    # the event id index leaves that transaction usable; in autocommit (the webhook view) a
    # failed statement leaves nothing behind and needs none.
    attempt = (
        transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    )
    try:
        with attempt:
            return _record_execute(values=values, on="body")
    except IntegrityError:
        # Another body under a stored event id: a conflict, or (for a fingerprint that
        # ignores some bytes) a true duplicate, decided on the event id (a key purged
        # past INBOX_DEDUP_DAYS meanwhile: a new event).
        return _record_execute(values=values, on="event_id")


# Every local of ingest, and of what it calls, is hidden from error reports and debug pages
# (docs/security.md, "No secrets in error reports"): they hold the source's secrets.
@sensitive_variables()
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
            if secrets_reload is None or exc.reason != SignatureFailureReason.MISMATCH:
                raise
            secrets = secrets_reload()
            verified = scheme.verify(
                raw_body=raw_body, headers=headers, secrets=secrets
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
        verifying_secret=verified.secret_fingerprint,
    )


def _evidence_record(
    *,
    event: InboxKey,
    raw_body: bytes,
    headers: dict[str, str],
    conflicting_fingerprint: str,
    payload_hash: str,
    remote_addr: str | None,
    now: datetime,
) -> None:
    """The evidence of a conflicting delivery of the event ``event`` keys: each distinct
    body stored once, its repeats counted, so that retries of a conflicting delivery cost a
    counter, not a copy of the body (docs/security.md, "Evidence of conflicts")."""
    params = [
        event.pk,
        raw_body,
        _db_value(FingerprintMismatch, "headers", headers),
        event.fingerprint,
        conflicting_fingerprint,
        payload_hash,
        remote_addr,
        _db_value(FingerprintMismatch, "received_at", now),
        _db_value(FingerprintMismatch, "last_seen_at", now),
    ]
    with connection.cursor() as cursor:
        cursor.execute(statements.evidence_upsert_sql(connection.vendor), params)


def _inbox_upsert(
    *,
    source: WebhookSource,
    envelope: Envelope,
    raw_body: bytes,
    headers: Mapping[str, str],
    remote_addr: str | None,
    verifying_secret: str,
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
        "secret_fingerprint": verifying_secret,
        "remote_addr": remote_addr,
        "received_at": now,
        "last_seen_at": now,
    }
    if tracing_enabled():
        # The request's context, in the row by the same statement (a column of its own:
        # ``statements.inbox_record_sql`` names it only when given).
        values["traceparent"] = traceparent_current()
    _inbox_db_values(values)
    log_extra = {"source": source.slug, "event_id": envelope.event_id}
    # One statement in autocommit is its own transaction: when execute() returns, the row is
    # committed, and the answer may say so. Nothing here talks to the broker: the relay of a
    # worker publishes the new row (``webhooks.outbox``).
    row = _inbox_record_execute(values=values, by_body=body_key is not None)
    original = None
    while row is None and original is None:
        # The evidence names the stored key's row and fingerprint, read from the ledger:
        # there whether or not the row is still in the inbox.
        original = (
            InboxKey.objects.filter(source=source, event_id=envelope.event_id)
            .only("inbox_event_id", "content_digest", "content_fingerprint")
            .first()
        )
        if original is None:
            # The key was purged past INBOX_DEDUP_DAYS since the statement answered: the
            # delivery is a new event now.
            row = _inbox_record_execute(values=values, by_body=body_key is not None)
    if row is None:
        assert original is not None
        _evidence_record(
            event=original,
            raw_body=raw_body,
            headers=stored_headers,
            conflicting_fingerprint=envelope.content_fingerprint,
            payload_hash=payload_hash,
            remote_addr=remote_addr,
            now=now,
        )
        WEBHOOK_INCONSISTENT_DUPLICATES.inc()
        logger.warning("inbox.inconsistent_duplicate", extra=log_extra)
        raise InconsistentDuplicate(event_id=envelope.event_id)
    inbox_event_id, event_id, delivery_count, processing_status = row
    created = delivery_count == 1
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
