"""One Idempotency-Key mechanism for every POST that opts into it.

``idempotent_execute`` runs an operation at most once per live (client, operation_type, key):
the idempotency record and whatever ``perform`` writes commit in one transaction, and the
database's partial unique constraint on live records decides concurrent first requests.

An operation whose whole effect is one new row (a deployment, a build) hands that row back
unsaved (``OperationResult.resource_row``). On PostgreSQL such a request inserts first: one
statement inserts the complete record (response included) with ``INSERT ... ON CONFLICT DO
NOTHING RETURNING``, the row only if the record was inserted, and, only when the key already has
a committed live record, returns that record instead; so a new key and a retry each cost one
round trip, and a new key reads nothing. A concurrent first request with the same key blocks on
the other's uncommitted record; when that one commits, the insert does nothing, and the record
(committed after the statement's snapshot, so not returned with it) is read once. Before any
of this, a retry of the very same bytes is answered by one statement that finds its record by
the request's hash (``idempotency_identical_replay``), before its body is parsed.

Any other operation (a status sync, whose ``perform`` writes) reads the key's record first, one
indexed read outside any transaction. A request that finds no live record runs ``perform`` and
inserts the record in one transaction with ``INSERT ... ON CONFLICT DO NOTHING``: on a conflict
the whole transaction (with what ``perform`` wrote) is rolled back, and the committed record is
replayed. Two operations never commit for one live key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone

from core.canonical import canonical_json
from core.db import fetchone_checking_connection
from core.errors import TemporarilyUnavailable
from core.models import ApiClient
from core.tracing import (
    current_span_set,
    idempotency_key_attribute,
    tracing_enabled,
)

from . import statements
from .errors import IdempotencyKeyReused
from .metrics import IDEMPOTENCY_REQUESTS, RequestOutcome
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
    # The operation's one new row, not saved yet: written together with the record.
    resource_row: models.Model | None = None
    # Members of the first response that are never stored, so never replayed (a new
    # secret, shown once): a retry answers ``body`` alone, byte for byte.
    answered_once: dict = dataclass_field(default_factory=dict)


@dataclass(frozen=True)
class IdempotentResponse:
    status_code: int
    body: bytes
    location: str
    replayed: bool


# ``idempotency.outcome`` on a request's span.
_SPAN_OUTCOMES = {
    RequestOutcome.NEW: "created",
    RequestOutcome.EXPIRED: "expired",
    RequestOutcome.REPLAYED: "replayed",
    RequestOutcome.CONFLICT: "conflict",
}


def _outcome_count(*, operation_type: str, outcome: RequestOutcome, key: str) -> None:
    """Counts what a request came to, and, tracing, says it on the request's span: the
    operation, the outcome and the key (hashed unless the setting asks for it raw)."""
    IDEMPOTENCY_REQUESTS.labels(operation_type, outcome).inc()
    if tracing_enabled():
        current_span_set(
            {
                "idempotency.operation": operation_type,
                "idempotency.outcome": _SPAN_OUTCOMES[outcome],
                "idempotency.key": idempotency_key_attribute(key),
            }
        )


def fingerprint_compute(*, fields: dict) -> str:
    return hashlib.sha256(canonical_json(fields)).hexdigest()


def response_body_render(body: dict) -> bytes:
    return json.dumps(body, cls=DjangoJSONEncoder, separators=(",", ":")).encode()


_RECORD_COLUMNS = (
    "client_id",
    "operation_type",
    "key",
    "fingerprint",
    "fingerprint_fields",
    "resource_id",
    "status",
    "response_status",
    "response_body",
    "response_location",
    "request_hash",
    "expires_at",
    "progress_deadline",
    "created_at",
    "updated_at",
)


def _record_values(
    *,
    client: ApiClient,
    operation_type: str,
    key: str,
    fingerprint: str,
    fingerprint_fields: dict,
    request_hash: str,
    result: OperationResult,
    body: bytes,
    now: datetime,
) -> list:
    expires_at = now + timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL_SECONDS)
    processing = result.record_status == IdempotencyStatus.PROCESSING
    return [
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
        request_hash,
        expires_at,
        result.progress_deadline if processing else None,
        now,
        now,
    ]


def _record_insert_sql() -> str:
    table = IdempotencyRecord._meta.db_table
    placeholders = ", ".join(["%s"] * len(_RECORD_COLUMNS))
    return (
        f"INSERT INTO {table} ({', '.join(_RECORD_COLUMNS)})"  # noqa: S608 - our names
        f" VALUES ({placeholders}) ON CONFLICT DO NOTHING RETURNING id"
    )


def _record_insert(*, values: list) -> int | None:
    """Inserts the complete live record; None when another live one exists (after waiting for
    it to commit or roll back if it is still in flight)."""
    with connection.cursor() as cursor:
        cursor.execute(_record_insert_sql(), values)
        row = cursor.fetchone()
    return row[0] if row else None


@functools.cache
def _row_fields(model: type[models.Model]) -> tuple[models.Field, ...]:
    return tuple(
        field for field in model._meta.concrete_fields if not field.primary_key
    )


def _row_parts(row: models.Model) -> tuple[str, list]:
    """The columns and values of a new row as it was built: a value the builder set (its
    timestamps, which the response already shows) is written as it is; one left unset takes
    its field's default, and a column with a database default of its own (a ledger's
    ``log_ticket``) is left to the database. The fields prepare their values for the
    connection itself, not through the ``connection`` proxy, which would look the connection
    up again for every value."""
    database = connections[DEFAULT_DB_ALIAS]
    model = type(row)
    left: list[models.Field] = []
    values = []
    for field in _row_fields(model):
        value = getattr(row, field.attname)
        if isinstance(value, DatabaseDefault):
            left.append(field)
            continue
        if value is None:
            value = field.pre_save(row, add=True)
        values.append(field.get_db_prep_save(value, database))
    return _columns(model, tuple(left)), values


@functools.cache
def _columns(model: type[models.Model], left: tuple[models.Field, ...]) -> str:
    """The quoted columns of ``model``'s new row, without those ``left`` to the database."""
    return ", ".join(
        connection.ops.quote_name(field.column)
        for field in _row_fields(model)
        if field not in left
    )


def _row_insert(row: models.Model) -> None:
    columns, values = _row_parts(row)
    table = connection.ops.quote_name(row._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns})"  # noqa: S608 - names from the model
            f" VALUES ({', '.join(['%s'] * len(values))})",
            values,
        )


def _record_and_row_insert(*, values: list, row: models.Model) -> int | None:
    """The record and the operation's row in one statement (PostgreSQL): the row is inserted
    only if the record was, so either both commit or neither exists. ``None`` as above."""
    columns, row_values = _row_parts(row)
    sql = (
        f"WITH record AS ({_record_insert_sql()}),"  # noqa: S608 - names from the models
        f" resource AS (INSERT INTO {connection.ops.quote_name(row._meta.db_table)}"
        f" ({columns}) SELECT {', '.join(['%s'] * len(row_values))}"
        " WHERE EXISTS (SELECT 1 FROM record))"
        " SELECT id FROM record"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*values, *row_values])
        found = cursor.fetchone()
    return found[0] if found else None


def _live_record_columns(table: str) -> str:
    return (
        f"{table}.id, {table}.fingerprint, {table}.fingerprint_fields,"
        f" {table}.expires_at > %s, {table}.response_body, {table}.response_location,"
        f" {table}.request_hash"
    )


@functools.cache
def _record_and_row_insert_first_sql(
    model: type[models.Model], columns: str, count: int
) -> str:
    """The statement of ``_record_and_row_insert_first``, built once per kind of row."""
    table = IdempotencyRecord._meta.db_table
    return (
        f"WITH record AS ({_record_insert_sql()}),"  # noqa: S608 - names from the models
        f" resource AS (INSERT INTO {connection.ops.quote_name(model._meta.db_table)}"
        f" ({columns}) SELECT {', '.join(['%s'] * count)}"
        " WHERE EXISTS (SELECT 1 FROM record))"
        " SELECT true, id, NULL, NULL::jsonb, NULL::boolean, NULL::bytea, NULL, NULL"
        " FROM record"
        f" UNION ALL SELECT false, {_live_record_columns(table)} FROM {table}"
        f" WHERE {table}.client_id = %s AND {table}.operation_type = %s"
        f" AND {table}.key = %s AND {table}.expired_at IS NULL"
        " AND NOT EXISTS (SELECT 1 FROM record)"
    )


def _record_and_row_insert_first(
    *, values: list, row: models.Model, client: ApiClient, operation_type: str, key: str
) -> tuple[int | None, LiveRecord | None]:
    """Inserts the record and the operation's row as ``_record_and_row_insert`` does, in the
    same statement returning the key's live record when the insert met one (PostgreSQL).
    ``(id, None)``: inserted; ``(None, record)``: the key's committed live record;
    ``(None, None)``: the insert met a record committed after the statement began (a
    concurrent first request it waited for), which only a read of its own can see."""
    columns, row_values = _row_parts(row)
    sql = _record_and_row_insert_first_sql(type(row), columns, len(row_values))
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            [
                *values,
                *row_values,
                timezone.now(),
                client.pk,
                operation_type,
                key,
            ],
        )
        found = cursor.fetchone()
    if found is None:
        return None, None
    if found[0]:
        return found[1], None
    return None, _live_record_from_row(found[1:])


@dataclass(frozen=True)
class LiveRecord:
    pk: int
    fingerprint: str
    fingerprint_fields: dict
    unexpired: bool
    response_body: bytes
    response_location: str
    request_hash: str = ""


def idempotency_live_record(
    *, client: ApiClient, operation_type: str, key: str
) -> LiveRecord | None:
    """The live record of a key, read with one statement through the partial unique index.
    Raw SQL: this read is the whole of a replay, and the ORM's query building costs more than
    the query itself (measured: 0.8 ms against 0.2 ms)."""
    table = IdempotencyRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT {_live_record_columns(table)}
            FROM {table}
            WHERE client_id = %s AND operation_type = %s AND key = %s
                AND expired_at IS NULL
            """,  # noqa: S608 - the table name is ours, every value is a parameter
            [timezone.now(), client.pk, operation_type, key],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return _live_record_from_row(row)


def _live_record_from_row(row) -> LiveRecord:
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
        request_hash=row[6],
    )


def _differing_fields(stored: dict, current: dict) -> list[str]:
    names = sorted(set(stored) | set(current))
    return [name for name in names if stored.get(name) != current.get(name)]


def _record_seen(*, pk: int, conflict: bool) -> None:
    """Counts a replay (or a 409 conflict) on the record: one UPDATE of the counters the
    console shows (docs/console.md). On PostgreSQL its commit does not wait for the WAL flush
    (``synchronous_commit`` off for that transaction alone): the counters are the console's
    telemetry, a crash may lose the last few counts, and a retry's answer does not wait on
    the disk for them."""
    params: tuple[datetime, int] = (timezone.now(), pk)
    # Only in a transaction of its own (one statement in autocommit, the setting local to
    # it): inside another, the setting would reach that one's commit too, so there the
    # UPDATE simply joins it.
    async_commit = connection.vendor == "postgresql" and not connection.in_atomic_block
    sql = statements.record_seen_sql(conflict=conflict, async_commit=async_commit)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def idempotency_identical_replay(
    *, client: ApiClient, operation_type: str, key: str, request_hash: str
) -> IdempotentResponse | None:
    """The replay of a retry whose body is byte for byte the body of the request that made
    the key's live, unexpired record (``request_hash``), counted on the record, or ``None``:
    one statement, before the body is parsed (docs/subsystems/idempotency.md, "An idempotent API
    call"). On PostgreSQL, in autocommit only (elsewhere ``None``). The statement is the
    request's first (``core.db.fetchone_checking_connection``): for a new key it takes the
    place of the connection's health check, so that a new key still costs two round trips;
    the count it writes, the console's telemetry, commits without waiting for the WAL flush,
    as ``_record_seen`` does."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return None
    now = timezone.now()
    row = fetchone_checking_connection(
        statements.IDENTICAL_REPLAY_SQL,
        [now, client.pk, operation_type, key, now, request_hash],
    )
    if row is None:
        return None
    _outcome_count(
        operation_type=operation_type, outcome=RequestOutcome.REPLAYED, key=key
    )
    return IdempotentResponse(
        status_code=200, body=bytes(row[0]), location=row[1], replayed=True
    )


def idempotency_replay(
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
        _outcome_count(
            operation_type=operation_type, outcome=RequestOutcome.CONFLICT, key=key
        )
        _record_seen(pk=record.pk, conflict=True)
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
    _outcome_count(
        operation_type=operation_type, outcome=RequestOutcome.REPLAYED, key=key
    )
    _record_seen(pk=record.pk, conflict=False)
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
    request_hash: str = "",
    perform_returns_unsaved_row: bool = False,
) -> IdempotentResponse:
    """Runs ``perform`` at most once per live (client, operation_type, key).

    - new key: ``perform`` runs in the transaction that writes the record (or hands back its
      one new row, written with the record in one statement); its response is stored byte for
      byte and returned;
    - same key and fingerprint: the stored response, ``replayed=True``; nothing is written;
    - same key, other fingerprint: ``IdempotencyKeyReused`` naming the differing fields;
    - key past ``IDEMPOTENCY_KEY_TTL_SECONDS``: the old record is marked expired (kept for
      audit) and the operation runs again as new.
    An exception from ``perform`` rolls the record back with it: nothing is recorded.
    ``perform_returns_unsaved_row``: ``perform`` writes nothing, it only builds its result and
    its one new row (``resource_row``, unsaved), so it may run before any transaction; on
    PostgreSQL the key is then inserted first and its record read only if it exists.
    """
    fingerprint = fingerprint_compute(fields=fingerprint_fields)
    replay_args: dict[str, Any] = {
        "client": client,
        "operation_type": operation_type,
        "key": key,
        "fingerprint": fingerprint,
        "fingerprint_fields": fingerprint_fields,
    }
    if perform_returns_unsaved_row and connection.vendor == "postgresql":
        inserted, existing = _insert_first(
            perform=perform, request_hash=request_hash, **replay_args
        )
        if inserted is not None:
            return inserted
        if existing is None:
            existing = idempotency_live_record(
                client=client, operation_type=operation_type, key=key
            )
    else:
        existing = idempotency_live_record(
            client=client, operation_type=operation_type, key=key
        )
    for _ in range(MAX_CLAIM_ROUNDS):
        now = timezone.now()
        if existing is not None and existing.unexpired:
            return idempotency_replay(record=existing, **replay_args)
        outcome = RequestOutcome.NEW if existing is None else RequestOutcome.EXPIRED
        record_id, result, body = _operation_record(
            perform=perform,
            perform_returns_unsaved_row=perform_returns_unsaved_row,
            existing=existing,
            now=now,
            request_hash=request_hash,
            **replay_args,
        )
        if record_id is not None:
            return _executed(
                result=result,
                body=body,
                outcome=outcome,
                client=client,
                key=key,
                operation_type=operation_type,
            )
        existing = idempotency_live_record(
            client=client, operation_type=operation_type, key=key
        )
    raise TemporarilyUnavailable("idempotency record could not be claimed")


def _executed(
    *,
    result: OperationResult,
    body: bytes,
    outcome: RequestOutcome,
    client: ApiClient,
    key: str,
    operation_type: str,
) -> IdempotentResponse:
    _outcome_count(operation_type=operation_type, outcome=outcome, key=key)
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
    if result.answered_once:
        body = response_body_render({**result.body, **result.answered_once})
    return IdempotentResponse(
        status_code=result.status_code,
        body=body,
        location=result.location,
        replayed=False,
    )


def _insert_first(
    *,
    perform: Callable[[], OperationResult],
    client: ApiClient,
    operation_type: str,
    key: str,
    **record_args,
) -> tuple[IdempotentResponse | None, LiveRecord | None]:
    """A new key's one statement: the operation's answer when its record and row were
    inserted, else the key's live record when the statement could see it (``None`` when it
    could not: read it)."""
    result = perform()
    if result.resource_row is None:
        raise TypeError("perform_returns_unsaved_row: perform returned no resource_row")
    now = timezone.now()
    body = response_body_render(result.body)
    values = _record_values(
        result=result,
        body=body,
        now=now,
        client=client,
        operation_type=operation_type,
        key=key,
        **record_args,
    )
    record_id, existing = _record_and_row_insert_first(
        values=values,
        row=result.resource_row,
        client=client,
        operation_type=operation_type,
        key=key,
    )
    if record_id is None:
        return None, existing
    answer = _executed(
        result=result,
        body=body,
        outcome=RequestOutcome.NEW,
        client=client,
        key=key,
        operation_type=operation_type,
    )
    return answer, None


def _operation_record(
    *,
    perform: Callable[[], OperationResult],
    perform_returns_unsaved_row: bool,
    existing: LiveRecord | None,
    now: datetime,
    **record_args,
) -> tuple[int | None, OperationResult, bytes]:
    """Runs the operation and records it; ``(None, ...)`` when another request committed the
    key first (whatever the operation wrote is undone)."""
    performed = None
    if (
        perform_returns_unsaved_row
        and existing is None
        and connection.vendor == "postgresql"
    ):
        performed = perform()
        if performed.resource_row is not None:
            body = response_body_render(performed.body)
            values = _record_values(result=performed, body=body, now=now, **record_args)
            record_id = _record_and_row_insert(
                values=values, row=performed.resource_row
            )
            return record_id, performed, body
    with transaction.atomic():
        if existing is not None:
            # Past its TTL: the record stays for audit, marked expired, and the key is free
            # for a new operation in this same transaction.
            IdempotencyRecord.objects.filter(
                pk=existing.pk, expired_at__isnull=True
            ).update(expired_at=now, updated_at=now)
        result = performed or perform()
        if result.resource_row is not None:
            _row_insert(result.resource_row)
        body = response_body_render(result.body)
        values = _record_values(result=result, body=body, now=now, **record_args)
        record_id = _record_insert(values=values)
        if record_id is None:
            # Another request committed this key first: undo ours, replay theirs.
            transaction.set_rollback(True)
    return record_id, result, body


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
