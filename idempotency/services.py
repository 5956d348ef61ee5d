"""One Idempotency-Key mechanism for every POST that opts into it.

``idempotent_execute`` runs an operation at most once per live (client, operation_type, key):
the idempotency record and whatever ``perform`` writes commit in one transaction, and the
database's partial unique constraint on live records decides concurrent first requests.

A retry is one indexed read of the committed record, outside any transaction. A request that
finds no live record runs ``perform`` and inserts the complete record (response included) with
``INSERT ... ON CONFLICT DO NOTHING``: a concurrent first request with the same key blocks on the
other's uncommitted row; when that one commits, this INSERT does nothing, the whole transaction
(with what ``perform`` wrote and the dispatch it scheduled) is rolled back, and the committed
record is replayed. Two operations never commit for one live key.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from core.canonical import canonical_json
from core.errors import TemporarilyUnavailable
from core.models import ApiClient

from .errors import IdempotencyKeyReused
from .metrics import IDEMPOTENCY_REQUESTS
from .models import IdempotencyRecord, IdempotencyStatus

logger = logging.getLogger(__name__)

# A live record that vanished between a conflicting INSERT and the read (expired and replaced
# by a third request) sends the request round again, this often before giving up.
MAX_CLAIM_ROUNDS = 5


@dataclass(frozen=True)
class OperationResult:
    """What ``perform`` returns: the first response, and the record's status. An operation
    that goes on after the response (``processing``) names when it must next show progress
    (``progress_deadline``): past it, without news, its key is stuck."""

    status_code: int
    body: dict
    resource_id: str = ""
    location: str = ""
    record_status: str = IdempotencyStatus.SUCCEEDED
    progress_deadline: datetime | None = None


@dataclass(frozen=True)
class IdempotentResponse:
    status_code: int
    body: bytes
    location: str
    replayed: bool


def fingerprint_compute(*, fields: dict) -> str:
    return hashlib.sha256(canonical_json(fields)).hexdigest()


def response_body_render(body: dict) -> bytes:
    return json.dumps(body, cls=DjangoJSONEncoder, separators=(",", ":")).encode()


def _record_insert(
    *,
    client: ApiClient,
    operation_type: str,
    key: str,
    fingerprint: str,
    fingerprint_fields: dict,
    result: OperationResult,
    body: bytes,
    now,
) -> int | None:
    """Inserts the complete live record; None when another live one exists (after waiting for
    it to commit or roll back if it is still in flight)."""
    table = IdempotencyRecord._meta.db_table
    expires_at = now + timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL_SECONDS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (client_id, operation_type, key, fingerprint,
                fingerprint_fields, resource_id, status, response_status, response_body,
                response_location, expires_at, progress_deadline, created_at, updated_at)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT DO NOTHING
            RETURNING id
            """,  # noqa: S608 - the table name is ours, every value is a parameter
            [
                client.pk,
                operation_type,
                key,
                fingerprint,
                canonical_json(fingerprint_fields).decode(),
                result.resource_id,
                result.record_status,
                result.status_code,
                body,
                result.location,
                expires_at,
                result.progress_deadline
                if result.record_status == IdempotencyStatus.PROCESSING
                else None,
                now,
                now,
            ],
        )
        row = cursor.fetchone()
    return row[0] if row else None


@dataclass(frozen=True)
class LiveRecord:
    pk: int
    fingerprint: str
    fingerprint_fields: dict
    unexpired: bool
    response_body: bytes
    response_location: str


def _live_record(
    *, client: ApiClient, operation_type: str, key: str
) -> LiveRecord | None:
    """The live record of a key, read with one statement through the partial unique index.
    Raw SQL: this read is the whole of a replay, and the ORM's query building costs more than
    the query itself (measured: 0.8 ms against 0.2 ms)."""
    table = IdempotencyRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT id, fingerprint, fingerprint_fields, expires_at > %s, response_body,
                response_location
            FROM {table}
            WHERE client_id = %s AND operation_type = %s AND key = %s
                AND expired_at IS NULL
            """,  # noqa: S608 - the table name is ours, every value is a parameter
            [timezone.now(), client.pk, operation_type, key],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    fields = row[2]
    if isinstance(fields, str):  # databases without a native JSON type (SQLite)
        fields = json.loads(fields)
    return LiveRecord(
        pk=row[0],
        fingerprint=row[1],
        fingerprint_fields=fields,
        unexpired=bool(row[3]),
        response_body=bytes(row[4]) if row[4] is not None else b"",
        response_location=row[5],
    )


def _differing_fields(stored: dict, current: dict) -> list[str]:
    names = sorted(set(stored) | set(current))
    return [name for name in names if stored.get(name) != current.get(name)]


def _replay(
    *,
    client: ApiClient,
    operation_type: str,
    key: str,
    record: LiveRecord,
    fingerprint: str,
    fingerprint_fields: dict,
) -> IdempotentResponse:
    if record.fingerprint != fingerprint:
        differing = _differing_fields(record.fingerprint_fields, fingerprint_fields)
        IDEMPOTENCY_REQUESTS.labels(operation_type, "conflict").inc()
        logger.info(
            "idempotency.conflict",
            extra={
                "operation_type": operation_type,
                "idempotency_key": key,
                "client_id": client.pk,
                "differing_fields": differing,
            },
        )
        raise IdempotencyKeyReused(differing_fields=differing)
    IDEMPOTENCY_REQUESTS.labels(operation_type, "replayed").inc()
    return IdempotentResponse(
        status_code=200,
        body=record.response_body,
        location=record.response_location,
        replayed=True,
    )


def idempotent_execute(
    *,
    client: ApiClient,
    operation_type: str,
    key: str,
    fingerprint_fields: dict,
    perform: Callable[[], OperationResult],
) -> IdempotentResponse:
    """Runs ``perform`` at most once per live (client, operation_type, key).

    - new key: ``perform`` runs in the transaction that writes the record; its response is
      stored byte for byte and returned;
    - same key and fingerprint: the stored response, ``replayed=True``; nothing is written;
    - same key, other fingerprint: ``IdempotencyKeyReused`` naming the differing fields;
    - key past ``IDEMPOTENCY_KEY_TTL_SECONDS``: the old record is marked expired (kept for
      audit) and the operation runs again as new.
    An exception from ``perform`` rolls the record back with it: nothing is recorded.
    """
    fingerprint = fingerprint_compute(fields=fingerprint_fields)
    replay_args = {
        "client": client,
        "operation_type": operation_type,
        "key": key,
        "fingerprint": fingerprint,
        "fingerprint_fields": fingerprint_fields,
    }
    existing = _live_record(client=client, operation_type=operation_type, key=key)
    for _ in range(MAX_CLAIM_ROUNDS):
        now = timezone.now()
        if existing is not None and existing.unexpired:
            return _replay(record=existing, **replay_args)
        outcome = "new" if existing is None else "expired"
        with transaction.atomic():
            if existing is not None:
                # Past its TTL: the record stays for audit, marked expired, and the key is
                # free for a new operation in this same transaction.
                IdempotencyRecord.objects.filter(
                    pk=existing.pk, expired_at__isnull=True
                ).update(expired_at=now, updated_at=now)
            result = perform()
            body = response_body_render(result.body)
            record_id = _record_insert(result=result, body=body, now=now, **replay_args)
            if record_id is None:
                # Another request committed this key first: undo ours, replay theirs.
                transaction.set_rollback(True)
        if record_id is not None:
            IDEMPOTENCY_REQUESTS.labels(operation_type, outcome).inc()
            logger.info(
                "idempotency.executed",
                extra={
                    "operation_type": operation_type,
                    "idempotency_key": key,
                    "client_id": client.pk,
                    "resource_id": result.resource_id,
                    "outcome": outcome,
                },
            )
            return IdempotentResponse(
                status_code=result.status_code,
                body=body,
                location=result.location,
                replayed=False,
            )
        existing = _live_record(client=client, operation_type=operation_type, key=key)
    raise TemporarilyUnavailable("idempotency record could not be claimed")


def idempotency_record_resolve(
    *, operation_type: str, resource_id: str, succeeded: bool
) -> None:
    """The operation a record started has ended: its record says how (``succeeded`` or
    ``failed``), and has no progress deadline any more. Called by the app that owns the
    resource, in its own transaction."""
    IdempotencyRecord.objects.filter(
        operation_type=operation_type, resource_id=resource_id
    ).update(
        status=IdempotencyStatus.SUCCEEDED if succeeded else IdempotencyStatus.FAILED,
        progress_deadline=None,
        updated_at=timezone.now(),
    )


def idempotency_record_progress_deadline_set(
    *, operation_type: str, resource_id: str, deadline: datetime
) -> None:
    """The operation a ``processing`` record started showed progress: it must show more (or
    end) by ``deadline``, else its key is stuck. Called by the app that owns the resource,
    in its own transaction; a resolved record is left as it is."""
    IdempotencyRecord.objects.filter(
        operation_type=operation_type,
        resource_id=resource_id,
        status=IdempotencyStatus.PROCESSING,
    ).update(progress_deadline=deadline, updated_at=timezone.now())


def idempotency_records_cleanup(*, batch_size: int = 5000) -> dict:
    """Marks live records past their TTL as expired, and purges expired records older than
    ``IDEMPOTENCY_AUDIT_RETENTION_SECONDS``. The resources they created stay."""
    now = timezone.now()
    retention_cutoff = now - timedelta(
        seconds=settings.IDEMPOTENCY_AUDIT_RETENTION_SECONDS
    )
    with transaction.atomic():
        to_expire = list(
            IdempotencyRecord.objects.select_for_update(skip_locked=True)
            .filter(expired_at__isnull=True, expires_at__lte=now)
            .values_list("pk", flat=True)[:batch_size]
        )
        expired = IdempotencyRecord.objects.filter(pk__in=to_expire).update(
            expired_at=now, updated_at=now
        )
    purged_ids = list(
        IdempotencyRecord.objects.filter(expired_at__lt=retention_cutoff).values_list(
            "pk", flat=True
        )[:batch_size]
    )
    purged, _ = IdempotencyRecord.objects.filter(pk__in=purged_ids).delete()
    if expired or purged:
        logger.info("idempotency.cleanup", extra={"expired": expired, "purged": purged})
    return {"expired": expired, "purged": purged}
