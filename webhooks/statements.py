"""The inbox's SQL written by hand, in one place beside its models (docs/subsystems/inbox.md,
"A webhook delivery"; docs/subsystems/processing.md, "A batch of inbox events on a worker").

Each statement does what the ORM cannot do in one round trip: ingest's upserts, the claim and
the close of a batch, the relay's claim, and a few reads of the selectors. Their column lists
are built from the models' ``_meta``: a column added to ``InboxEvent`` is the model and its
migration, nothing here. Everything else the inbox writes goes through the ORM. A set
statement runs through ``core.db.set_statement_execute`` (binary arrays, its own
transaction's lock timeout).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.db import connection, models

from core.db import LOCK_TIMEOUT_IN_STATEMENT

from .models import (
    BulkReplayJob,
    FingerprintMismatch,
    InboxAttempt,
    InboxEvent,
    InboxKey,
    ProcessingStatus,
    SignatureFailure,
    SourceHold,
    WebhookSecret,
    WebhookSource,
)

_EVENTS = InboxEvent._meta.db_table
_KEYS = InboxKey._meta.db_table
_ATTEMPTS = InboxAttempt._meta.db_table
_SOURCES = WebhookSource._meta.db_table
_HOLDS = SourceHold._meta.db_table


def _field(model: type[models.Model], name: str) -> models.Field:
    return cast(models.Field, model._meta.get_field(name))


# --- ingest ---------------------------------------------------------------------------------


def _literal(value: Any) -> str | None:
    """A model's constant default written into a statement (a boolean, a number, a string),
    or ``None`` when it must be bound instead."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return None


@functools.cache
def inbox_new_row_fields(given: tuple[str, ...]) -> tuple[models.Field, ...]:
    """The columns a new inbox row takes beside the delivery's own (``given``): every concrete
    field but the key, those the database fills (``db_default``) and the nullable ones with no
    default (NULL), each with its model default. A column added to the model is here."""
    return tuple(
        field
        for field in InboxEvent._meta.concrete_fields
        if not field.primary_key
        and field.attname not in given
        and field.db_default is models.NOT_PROVIDED
        and not (field.null and field.get_default() is None)
    )


# The delivery's values its key in the ledger holds, bound first, in this order (``InboxKey``).
KEY_COLUMNS = (
    "source_id",
    "event_id",
    "body_key",
    "content_fingerprint",
    "received_at",
)

# The one the ledger stores in another form than the inbox row: the content's fingerprint,
# as the 32 bytes of its SHA-256 (``InboxKey.content_digest``), not its 64 hex characters.
_KEY_DIGEST = "content_fingerprint"


def _key_column(name: str) -> str:
    """The ledger's column holding the delivery's value ``name`` (of ``KEY_COLUMNS``)."""
    return "content_digest" if name == _KEY_DIGEST else name


def key_params(values: dict[str, Any]) -> list[Any]:
    """SQLite: the ledger's values of a delivery's ``KEY_COLUMNS``, in their order, as the
    ledger stores them (``key_insert_sql``)."""
    return [
        bytes.fromhex(values[name]) if name == _KEY_DIGEST else values[name]
        for name in KEY_COLUMNS
    ]


def _key_conflict(on: str) -> tuple[str, str]:
    """The ledger's unique index a delivery is recorded on, and the condition under which a
    conflict there counts as a duplicate (see ``inbox_record_sql``)."""
    keys = connection.ops.quote_name(_KEYS)
    if on == "event_id":
        # A key written before ``webhooks.0037`` holds its fingerprint as hex text.
        return (
            "(source_id, event_id)",
            f" WHERE {keys}.content_digest = EXCLUDED.content_digest"
            f" OR {keys}.content_fingerprint = encode(EXCLUDED.content_digest, 'hex')",
        )
    return "(source_id, body_key) WHERE body_key IS NOT NULL", ""


def _key_value(name: str, bound: str) -> str:
    """The ledger's value of the delivery's ``name`` from its ``bound`` parameter."""
    return f"decode({bound}, 'hex')" if name == _KEY_DIGEST else bound


def _cast_type(field: models.Field) -> str:
    """The type a bound value of ``field`` is cast to in a statement: a value in a
    ``SELECT`` list is not typed by the column it is inserted into."""
    return cast(Any, field).cast_db_type(connection)


def recent_days(received_at: datetime) -> tuple[datetime, datetime]:
    """The received times in which ``inbox_record_sql`` counts a duplicate on its row: the
    UTC day of ``received_at`` and the day before it. Written into the statement as
    constants, so that PostgreSQL plans it over those days' time partitions alone, however
    many days the inbox holds (docs/scaling.md, "Time partitions of the inbox"): a statement
    that names the partitioned table without a constant bound on its key opens and locks
    every partition, and each of their indexes, at every run."""
    day = day_start(received_at)
    return day - timedelta(days=1), day + timedelta(days=1)


def instant_sql(instant: datetime) -> str:
    """An instant written into a statement as a constant: DDL takes no bound parameters, and
    a constant bound on the partition key is what the planner prunes partitions by."""
    return f"'{instant.astimezone(UTC).isoformat()}'::timestamptz"


def day_start(instant: datetime) -> datetime:
    """The start of the UTC day of ``instant``."""
    return instant.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def received_days(instants: list[datetime]) -> tuple[datetime, datetime] | None:
    """The UTC days ``[first, last + 1)`` that hold every one of ``instants`` (rows' received
    times), for a statement on rows known by id to name as constants
    (``batch_claim_sql``, ``batch_read_sql``, ``batch_finish_sql``); ``None`` for none."""
    if not instants:
        return None
    return day_start(min(instants)), day_start(max(instants)) + timedelta(days=1)


def _since_condition(column: str, since: datetime | None) -> str:
    """``column`` from ``since`` on, written as a constant (see ``_days_condition``);
    nothing for ``None``: every partition."""
    return "" if since is None else f"AND {column} >= {instant_sql(since)}"


def _range_condition(
    column: str, since: datetime | None, until: datetime | None
) -> str:
    """``column`` from ``since`` and before ``until``, each written as a constant when given
    (``None``: no bound on that side)."""
    before = "" if until is None else f" AND {column} < {instant_sql(until)}"
    return f"{_since_condition(column, since)}{before}"


def _rows_days_condition(column: str, days: tuple[datetime, datetime] | None) -> str:
    """For a statement on rows known by id: ``column`` within ``days`` (constants, which
    plan it over those days' partitions alone) and among the rows' own received times
    (``%(received)s``). Named one by one, the received times leave no plan a way to read
    more than the rows: on a day's partition that no analyze has visited, PostgreSQL guesses
    a half percent of the partition for the days' range and had read the whole day through
    its received-time index to find a batch (docs/scaling.md, "Plans made on an empty
    day"). Nothing for ``None``: every partition."""
    if days is None:
        return ""
    return (
        f"{_days_condition(column, days)}"
        f" AND {column} = ANY(%(received)s::timestamptz[])"
    )


def _days_condition(column: str, days: tuple[datetime, datetime] | None) -> str:
    """``column`` within ``days``, written as constants: what lets PostgreSQL plan a
    statement over those days' time partitions alone (``recent_days``). Nothing for
    ``None``: every partition."""
    if days is None:
        return ""
    return _range_condition(column, *days)


# One statement per day and variant: the days a process has run through, at most.
@functools.lru_cache(maxsize=64)
def inbox_record_sql(
    vendor: str, *, on: str, given: tuple[str, ...], days: tuple[datetime, datetime]
) -> str:
    """The one statement that records a delivery on PostgreSQL: its key in the ledger
    (``InboxKey``) on the unique index ``on`` names, and with it the inbox row of a new
    event, or the count of a duplicate on the stored row. The ledger's columns
    (``KEY_COLUMNS``) are bound first, then the rest of the delivery's (``given``), then
    every other column of a new row's default (``inbox_new_row_fields``), written in when it
    is a constant, and last the duplicate's ``last_seen_at``. Returns ``(id, event_id,
    delivery_count, processing_status, received_at)``, the last the key's (its row's).

    ``on="event_id"``: new / duplicate / conflict by ``(source, event_id)``. A new key comes
    back with delivery_count 1 and its row inserted; a true duplicate (same fingerprint) is
    counted and comes back with delivery_count > 1; a conflicting fingerprint updates
    nothing and returns no row.

    ``on="body"``: for events whose id is not signed, by ``(source, body_key)``: the same
    signed bytes are the same event whatever id they came with, counted on the stored key,
    whose event id comes back. The same id with other bytes violates ``(source, event_id)``
    instead and raises ``IntegrityError``.

    Either way the ledger's unique index decides races. A duplicate's status is read by the
    update of its row, found by its primary key from the key's values (one probe, never a
    join: a generic plan made while a day's partition was empty had walked the whole day for
    every delivery, docs/scaling.md, "Plans made on an empty day"), in the
    statement's snapshot, among the rows received in ``days``
    (``recent_days``): NULL when the row committed after the statement began (a concurrent
    first delivery, which the ledger waited for), was received earlier than ``days`` (a
    redelivery days later) or has left the inbox; the caller then counts it with
    ``inbox_duplicate_count_sql``."""
    quote = connection.ops.quote_name
    events, keys = quote(_EVENTS), quote(_KEYS)
    column = {f.attname: f.column for f in InboxEvent._meta.concrete_fields}
    key_names = ", ".join(quote(_key_column(name)) for name in KEY_COLUMNS)
    key_values = ", ".join(
        _key_value(name, f"%s::{_cast_type(_field(InboxEvent, name))}")
        for name in KEY_COLUMNS
    )
    names = ["id", *(quote(column[name]) for name in KEY_COLUMNS)]
    values = [
        "k.inbox_event_id",
        *(
            "encode(k.content_digest, 'hex')"
            if name == _KEY_DIGEST
            else f"k.{column[name]}"
            for name in KEY_COLUMNS
        ),
    ]
    for name in given:
        if name in KEY_COLUMNS:
            continue
        field = _field(InboxEvent, name)
        names.append(quote(field.column))
        values.append(f"%s::{_cast_type(field)}")
    for field in inbox_new_row_fields(given):
        names.append(quote(field.column))
        literal = None if callable(field.default) else _literal(field.get_default())
        values.append(literal or f"%s::{_cast_type(field)}")
    target, condition = _key_conflict(on)
    return f"""WITH k AS (
    INSERT INTO {keys} (inbox_event_id, {key_names}, delivery_count)
    VALUES (nextval(pg_get_serial_sequence('{events}', 'id')), {key_values}, 1)
    ON CONFLICT {target} DO UPDATE SET delivery_count = {keys}.delivery_count + 1{condition}
    RETURNING inbox_event_id, {key_names}, delivery_count
), new AS (
    INSERT INTO {events} ({", ".join(names)})
    SELECT {", ".join(values)} FROM k WHERE k.delivery_count = 1
    RETURNING processing_status
), counted AS (
    UPDATE {events} AS e
       SET delivery_count = (SELECT delivery_count FROM k), last_seen_at = %s
     WHERE e.id = (SELECT inbox_event_id FROM k WHERE delivery_count > 1)
       AND e.received_at = (SELECT received_at FROM k)
       {_days_condition("e.received_at", days)}
    RETURNING e.processing_status
)
SELECT k.inbox_event_id, k.event_id, k.delivery_count,
       COALESCE((SELECT processing_status FROM new),
                (SELECT processing_status FROM counted)),
       k.received_at
  FROM k
"""  # noqa: S608 - table and column names from the models, values bound


def inbox_duplicate_count_sql(vendor: str) -> str:
    """A duplicate's count and last seen time on its stored row, by its id and received
    time (which name its time partition), whose status comes back (none when the row has
    left the inbox). Never lowered: the ledger's key counted the copy and committed before
    this runs, so two copies counted 10 and 11 on the key may reach the row 11 first, and
    the row must keep 11 (a copy lost from the row's count was seen in the suite's race of
    ten copies across a midnight)."""
    events = connection.ops.quote_name(_EVENTS)
    greatest = "MAX" if vendor == "sqlite" else "GREATEST"
    return (
        f"UPDATE {events} SET delivery_count = {greatest}(delivery_count, %s),"  # noqa: S608
        f" last_seen_at = {greatest}(last_seen_at, %s)"
        " WHERE id = %s AND received_at = %s RETURNING processing_status"
    )


def key_count_params(values: dict[str, Any], *, on: str) -> list[Any]:
    """SQLite: the parameters of ``key_count_sql`` for a delivery's (adapted) ``values``."""
    if on != "event_id":
        return [values["source_id"], values["body_key"]]
    fingerprint = values[_KEY_DIGEST]
    return [
        values["source_id"],
        values["event_id"],
        bytes.fromhex(fingerprint),
        fingerprint,
    ]


@functools.cache
def key_count_sql(vendor: str, *, on: str) -> str:
    """SQLite: a duplicate counted on its key, by the unique index ``on`` names (see
    ``inbox_record_sql``), returning ``(id, event_id, delivery_count, received_at)``; no row
    when the key is not there or (``on="event_id"``) its fingerprint differs."""
    keys = connection.ops.quote_name(_KEYS)
    where = (
        "source_id = %s AND event_id = %s"
        " AND (content_digest = %s OR content_fingerprint = %s)"
        if on == "event_id"
        else "source_id = %s AND body_key = %s"
    )
    return (
        f"UPDATE {keys} SET delivery_count = delivery_count + 1"  # noqa: S608
        f" WHERE {where}"
        " RETURNING inbox_event_id, event_id, delivery_count, received_at"
    )


@functools.cache
def inbox_insert_sql(vendor: str, *, given: tuple[str, ...]) -> str:
    """SQLite: a new event's inbox row, the delivery's columns (``given``) bound in that
    order, then the defaults as ``inbox_record_sql`` has them; returns its id and status."""
    quote = connection.ops.quote_name
    column = {f.attname: f.column for f in InboxEvent._meta.concrete_fields}
    names = [quote(column[name]) for name in given]
    values = ["%s"] * len(given)
    for field in inbox_new_row_fields(given):
        names.append(quote(field.column))
        literal = None if callable(field.default) else _literal(field.get_default())
        values.append(literal or "%s")
    return (
        f"INSERT INTO {quote(_EVENTS)} ({', '.join(names)})"  # noqa: S608
        f" VALUES ({', '.join(values)}) RETURNING id, processing_status"
    )


@functools.cache
def key_insert_sql(vendor: str) -> str:
    """SQLite: a new event's key, its row's id first, then ``key_params``."""
    quote = connection.ops.quote_name
    columns = ", ".join(
        ["inbox_event_id", *map(_key_column, KEY_COLUMNS), "delivery_count"]
    )
    placeholders = ", ".join(["%s"] * (len(KEY_COLUMNS) + 1))
    return f"INSERT INTO {quote(_KEYS)} ({columns}) VALUES ({placeholders}, 1)"  # noqa: S608


@functools.cache
def _bound_defaults(given: tuple[str, ...]) -> tuple[models.Field, ...]:
    """The fields whose default ``inbox_record_sql`` binds rather than writes in."""
    return tuple(
        field
        for field in inbox_new_row_fields(given)
        if callable(field.default) or _literal(field.get_default()) is None
    )


def inbox_insert_params(values: dict[str, Any]) -> list[Any]:
    """The parameters of ``inbox_insert_sql`` for a delivery's (adapted) ``values``."""
    return [*values.values(), *_defaults_bound(tuple(values))]


def _defaults_bound(given: tuple[str, ...]) -> list[Any]:
    return [
        field.get_db_prep_save(field.get_default(), connection)
        for field in _bound_defaults(given)
    ]


def inbox_record_params(values: dict[str, Any]) -> list[Any]:
    """The parameters of ``inbox_record_sql`` for a delivery's (adapted) ``values``."""
    return [
        *(values[name] for name in KEY_COLUMNS),
        *(value for name, value in values.items() if name not in KEY_COLUMNS),
        *_defaults_bound(tuple(values)),
        values["last_seen_at"],
    ]


@functools.cache
def inbox_adapted_fields(given: tuple[str, ...]) -> tuple[models.Field, ...]:
    """Of the delivery's columns, those whose Python value the driver cannot take as it is
    (instants on SQLite, JSON): they go through their field's adaptation."""
    return tuple(
        field
        for name in given
        if isinstance(
            field := _field(InboxEvent, name), models.JSONField | models.DateTimeField
        )
    )


# The evidence of a conflicting delivery: its columns, bound.
EVIDENCE_COLUMNS = (
    "event_id",
    "raw_body",
    "headers",
    "original_fingerprint",
    "conflicting_fingerprint",
    "conflicting_payload_hash",
    "remote_addr",
    "received_at",
    "last_seen_at",
)


@functools.cache
def evidence_upsert_sql(vendor: str) -> str:
    """One statement: the conflicting body's first delivery stores it, a repeat counts on that
    row (the partial unique index on (event, body) that rows counting repeats are in)."""
    quote = connection.ops.quote_name
    table = quote(FingerprintMismatch._meta.db_table)
    columns = ", ".join(
        quote(_field(FingerprintMismatch, name).column) for name in EVIDENCE_COLUMNS
    )
    placeholders = ", ".join(["%s"] * len(EVIDENCE_COLUMNS))
    return (
        f"INSERT INTO {table} ({columns}, repeat_count, counts_repeats,"  # noqa: S608
        f" investigation_note) VALUES ({placeholders}, 1, TRUE, '')"
        " ON CONFLICT (event_id, conflicting_payload_hash) WHERE counts_repeats"
        f" DO UPDATE SET repeat_count = {table}.repeat_count + 1,"
        " last_seen_at = EXCLUDED.last_seen_at"
    )


@functools.cache
def signature_failure_upsert_sql(vendor: str) -> str:
    """One upsert of the (source, reason, minute) counter of failed authentications."""
    table = connection.ops.quote_name(SignatureFailure._meta.db_table)
    return (
        f"INSERT INTO {table} (source_id, reason, window_start, count, last_remote_addr,"  # noqa: S608
        " last_seen_at) VALUES (%s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (source_id, reason, window_start) DO UPDATE SET"
        f" count = {table}.count + 1, last_remote_addr = EXCLUDED.last_remote_addr,"
        " last_seen_at = EXCLUDED.last_seen_at"
    )


# --- processing -----------------------------------------------------------------------------

# What the claim of a batch reads of each row: what the handlers read, and the row's
# ``traceparent``, which a traced batch links to (core/tracing.py). Every other field is
# deferred on the instance, read from the database if a handler ever touches it, so that a
# column added to the model needs nothing here. An instant comes back as seconds since the
# epoch: a stored date Python cannot hold must not fail the whole batch.
CLAIMED_FIELDS = (
    "id",
    "attempts",
    "event_id",
    "event_type",
    "source_id",
    "entity_id",
    "entity_type",
    "source_version",
    "occurred_at",
    "raw_body",
    "traceparent",
)
# And of its source.
CLAIMED_SOURCE_FIELDS = ("id", "slug", "handler")


def _claimed_columns(*, attempts: str = "e.attempts") -> str:
    """``CLAIMED_FIELDS`` of ``e``, ``attempts`` as given, then the source's and the received
    time."""
    columns = []
    for name in CLAIMED_FIELDS:
        field = _field(InboxEvent, name)
        if name == "attempts":
            columns.append(attempts)
        elif isinstance(field, models.DateTimeField):
            columns.append(f"EXTRACT(EPOCH FROM e.{field.column})")
        else:
            columns.append(f"e.{field.column}")
    columns += [
        f"s.{_field(WebhookSource, name).column}" for name in CLAIMED_SOURCE_FIELDS[1:]
    ]
    # Last, for the attempt (its ``event_received_at``), as stored: not an epoch.
    columns.append("e.received_at AS event_received_at")
    return ", ".join(columns)


# The received times of a batch's rows, read from the ledger (which holds every row's, and
# is one table): ``(received times, keys found)``, for the statements that name them
# (``_rows_days_condition``).
BATCH_RECEIVED_SQL = f"""
SELECT coalesce(array_agg(received_at), '{{}}'), count(*) FROM {_KEYS}
 WHERE inbox_event_id = ANY(%(ids)s::bigint[])
"""  # noqa: S608 - a table name, values bound


# A row no paused source holds (nor a drain that has not reached it), for a worker to take.
_NOT_HELD = f"""NOT EXISTS (
           SELECT 1 FROM {_HOLDS} AS h
            WHERE h.source_id = e.source_id
              AND (h.paused_at IS NOT NULL
                   OR e.dispatched_at IS NULL
                   OR e.dispatched_at < h.drain_started_at))"""  # noqa: S608


def _takeable(now: str) -> str:
    """A row a worker may take at ``now`` (a placeholder): ``received``, or ``failed`` with
    its retry due. Written as a ``CASE``, which no index serves, so that the statements
    that take it find their rows by id whatever their plan counts: a generic plan made while
    the day's partition was empty had read the status index instead, every waiting row of
    the day, for every batch (docs/scaling.md, "Plans made on an empty day")."""
    return f"""CASE e.processing_status
              WHEN 'received' THEN true
              WHEN 'failed' THEN e.next_attempt_at IS NULL OR e.next_attempt_at <= {now}
              ELSE false END"""


# The claim of a batch, in one statement: the rows that can be taken become ``processing``
# with their lease, their attempts are inserted (with the event's received time), and
# ``CLAIMED_FIELDS`` come back, then the source's ``CLAIMED_SOURCE_FIELDS``, the event's
# received time and the attempt's id. Within ``days`` (``received_days``) when given. What a
# batch runs event by event claims this way (docs/subsystems/processing.md, "A batch of
# inbox events on a worker"); a set reads its rows with ``batch_read_sql`` instead.
@functools.lru_cache(maxsize=64)
def batch_claim_sql(days: tuple[datetime, datetime] | None) -> str:
    return f"""
WITH claimed AS (
    UPDATE {_EVENTS} AS e
       SET processing_status = 'processing',
           attempts = e.attempts + 1,
           lease_expires_at = %(lease)s
      FROM {_SOURCES} AS s
     WHERE e.id = ANY(%(ids)s)
       {_rows_days_condition("e.received_at", days)}
       AND s.id = e.source_id
       -- The claim's row locks give up after INBOX_LOCK_TIMEOUT_MS: the statement's own
       -- transaction's lock_timeout, set once (an InitPlan) before any row is locked.
       AND {LOCK_TIMEOUT_IN_STATEMENT}
       AND {_NOT_HELD}
       AND {_takeable("%(now)s")}
    RETURNING {_claimed_columns()}
), attempt AS (
    INSERT INTO {_ATTEMPTS}
           (event_id, event_received_at, number, started_at, outcome, resulting_status,
            error, worker)
    SELECT id, event_received_at, attempts, %(now)s, 'started', '', '', %(worker)s
      FROM claimed
    RETURNING id, event_id
)
SELECT claimed.*, attempt.id FROM claimed JOIN attempt ON attempt.event_id = claimed.id
ORDER BY claimed.id
"""  # noqa: S608 - table names from the models, values bound


BATCH_CLAIM_SQL = batch_claim_sql(None)


# The rows of a batch that a set can take, read without a lock or a write: the claim's
# condition and columns (``attempts`` as the number of the attempt to come), then ``0`` for
# an attempt not yet written. The set's close (``batch_finish_sql``) takes them only if
# nothing claimed them meanwhile (docs/subsystems/processing.md, "A set in one transaction").
@functools.lru_cache(maxsize=64)
def batch_read_sql(days: tuple[datetime, datetime] | None) -> str:
    return f"""
SELECT {_claimed_columns(attempts="e.attempts + 1")}, 0
  FROM {_EVENTS} AS e JOIN {_SOURCES} AS s ON s.id = e.source_id
 WHERE e.id = ANY(%(ids)s)
   {_rows_days_condition("e.received_at", days)}
   AND {_NOT_HELD}
   AND {_takeable("%(now)s")}
 ORDER BY e.id
"""  # noqa: S608 - table names from the models, values bound


# The end of a set (a set of one too), in one statement, in the transaction of its domain
# change: every row's outcome with its attempt counted, and its attempt inserted whole
# (started when the set read its rows), each only while the row is still as the read found
# it (its status claimable, its attempts unchanged: nothing claimed or closed it meanwhile).
# The caller compares the rows closed with the rows given: one taken meanwhile fails the set
# (rolled back, then claimed and run per event). Within ``days`` (``received_days``) when
# given.
@functools.lru_cache(maxsize=64)
def batch_finish_sql(days: tuple[datetime, datetime] | None) -> str:
    return f"""
WITH v AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(numbers)s::int[], %(statuses)s::text[],
                         %(processed_at)s::timestamptz[], %(errors)s::text[],
                         %(causes)s::text[], %(outcomes)s::text[],
                         %(attempt_errors)s::text[])
           AS v(id, number, status, processed_at, error, cause, outcome, attempt_error)
), closed AS (
    UPDATE {_EVENTS} AS e
       SET processing_status = v.status,
           processed_at = v.processed_at,
           error_message = v.error,
           dead_letter_cause = v.cause,
           next_attempt_at = NULL,
           lease_expires_at = NULL,
           attempts = v.number
      FROM v
     WHERE e.id = ANY(%(ids)s::bigint[]) AND e.id = v.id AND e.attempts = v.number - 1
       {_rows_days_condition("e.received_at", days)}
       AND {_takeable("%(started)s")}
    RETURNING e.id, e.received_at
)
INSERT INTO {_ATTEMPTS}
       (event_id, event_received_at, number, started_at, finished_at, outcome,
        resulting_status, error, worker)
SELECT v.id, closed.received_at, v.number, %(started)s, %(now)s, v.outcome, v.status,
       v.attempt_error, %(worker)s
  FROM v JOIN closed ON closed.id = v.id
RETURNING event_id
"""  # noqa: S608 - table names from the models, values bound


BATCH_FINISH_SQL = batch_finish_sql(None)


# --- the relay ------------------------------------------------------------------------------

# The relay's claim and its look before it, on PostgreSQL: what ``outbox._waiting_new`` and
# ``outbox._waiting_retries`` select and ``outbox._take`` does, written once as SQL, so that a
# round spends no time building the same statements again (building them was about a third of
# a busy relay's CPU: docs/bench-log/2026-12-02.md, "The relay's own cost"). Their conditions
# are those of the partial indexes ``webhooks_inbox_outbox_idx`` and
# ``webhooks_inbox_retry_idx``, as the querysets' are. The embedded default (SQLite) takes
# the querysets' way.

# No message yet, not set aside, of a source not held.
_WAITING = f"""dispatched_at IS NULL AND held_at IS NULL
    AND source_id NOT IN (SELECT source_id FROM {_HOLDS})"""  # noqa: S608 - table names
_NEW = f"processing_status = 'received' AND {_WAITING}"
_DUE_RETRY = (
    f"processing_status = 'failed' AND next_attempt_at <= %(now)s AND {_WAITING}"
)


def _waiting_exists_sql(received: str) -> str:
    """Whether a new row or a due retry waits among the rows ``received`` bounds: one probe
    of each partial index of the partitions it names."""
    return f"""
SELECT EXISTS (SELECT 1 FROM {_EVENTS} WHERE {_NEW} {received})
    OR EXISTS (SELECT 1 FROM {_EVENTS} WHERE {_DUE_RETRY} {received})
"""  # noqa: S608 - table names, constants written by instant_sql, values bound


# The relay's look for waiting rows, received from ``since`` on (``None``: wherever they are).
@functools.lru_cache(maxsize=64)
def relay_has_waiting_sql(since: datetime | None) -> str:
    return _waiting_exists_sql(_since_condition("received_at", since))


# Whether any row received before ``before`` waits (a replayed or retried event of an older
# day, a row set aside and released): what tells the relay whether its claims may name
# recent days alone (``outbox.InboxOutbox``, docs/scaling.md, "Time partitions of the
# inbox"). Reads the partitions before ``before`` only.
@functools.lru_cache(maxsize=64)
def relay_older_waiting_sql(before: datetime) -> str:
    return _waiting_exists_sql(f"AND received_at < {instant_sql(before)}")


# New rows first, in id order, then due retries in the room left, soonest due first (the
# caller sorts what comes back). Each kind is read a range of received times at a time,
# oldest first, each range only for the room the scans before it left (none: it reads
# nothing): the ranges start at ``starts`` (the first may be ``None``: from the oldest row;
# the last runs on without end), one per time partition, so that each scan is one
# partition's partial index read in its order (new rows by id, retries by
# ``next_attempt_at``), which stops at the rows wanted. Over several partitions at once the
# planner reads every waiting row of all of them and sorts them first whenever it counts
# fewer than the limit (docs/bench-log/2026-12-06.md, "The relay's claim read every
# waiting row"): thousands of due retries after a downstream outage, at every claim. The
# rows are locked, not yet stamped: ``relay_stamp_sql`` stamps them, in the same
# transaction, naming the days they were received on (``received_days``), so that the
# update is planned over those days' time partitions alone (docs/scaling.md, "Time
# partitions of the inbox").
@functools.lru_cache(maxsize=64)
def relay_claim_sql(starts: tuple[datetime | None, ...]) -> str:
    ranges = list(zip(starts, (*starts[1:], None), strict=True))
    scans = [(0, _NEW, "id", r) for r in ranges] + [
        (1, _DUE_RETRY, "next_attempt_at", r) for r in ranges
    ]
    parts = []
    for n, (retry, waiting, order, (since, until)) in enumerate(scans):
        received = _range_condition("received_at", since, until)
        # The rows the scans before it took (taken<n>), and the room they left.
        taken = f"(SELECT n FROM taken{n - 1})"  # noqa: S608 - its own names
        room = "%(limit)s" if n == 0 else f"GREATEST(%(limit)s - {taken}, 0)"
        before = "" if n == 0 else f"{taken} + "
        parts.append(
            f"""scan{n} AS (
    SELECT {retry} AS retry, id, event_id, entity_id, received_at FROM {_EVENTS}
     WHERE {waiting} {received}
     ORDER BY {order} LIMIT {room} FOR UPDATE SKIP LOCKED
), taken{n} AS (SELECT {before}count(*) AS n FROM scan{n})"""  # noqa: S608
            # table names, constants written by instant_sql, values bound
        )
    union = "\nUNION ALL\n".join(
        f"SELECT * FROM scan{n}"  # noqa: S608 - the statement's own names
        for n in range(len(scans))
    )
    return f"""
WITH {", ".join(parts)}
{union}
"""


@functools.lru_cache(maxsize=64)
def relay_stamp_sql(days: tuple[datetime, datetime] | None) -> str:
    """The rows ``relay_claim_sql`` locked, stamped dispatched (and out of any hold)."""
    return (
        f"UPDATE {_EVENTS} SET dispatched_at = %(now)s, held_at = NULL"  # noqa: S608
        f" WHERE id = ANY(%(ids)s::bigint[])"
        f" {_rows_days_condition('received_at', days)}"
    )


RELAY_HELD_SQL = f"SELECT source_id FROM {_HOLDS} ORDER BY source_id"  # noqa: S608 - a table name
# A row a relay published is unfinished while still waiting, being processed, or a published
# retry (``InboxOutbox.unfinished``).
RELAY_UNFINISHED_STATUSES = (
    ProcessingStatus.RECEIVED,
    ProcessingStatus.PROCESSING,
    ProcessingStatus.FAILED,
)
RELAY_UNFINISHED_SQL = f"""
SELECT id FROM {_EVENTS}
 WHERE id = ANY(%(ids)s::bigint[]) AND dispatched_at IS NOT NULL
   AND processing_status IN ({", ".join(f"'{status}'" for status in RELAY_UNFINISHED_STATUSES)})
"""  # noqa: S608 - table names and the statuses' own values


# --- time partitions ------------------------------------------------------------------------


def partition_rows_move_sql(*, into: str, source: str) -> str:
    """Every row of the table ``source`` copied into ``into``, which has the same columns
    (``partitions.table_unpartition``)."""
    quote = connection.ops.quote_name
    return f"INSERT INTO {quote(into)} SELECT * FROM {quote(source)}"  # noqa: S608


def key_final_status_sql(*, partition: str) -> str:
    """The status each row of the inbox partition ``partition`` ends with, on its key, for
    the rows not ``processed`` (a blank ``final_status`` says ``processed``): written as
    retention drops the partition."""
    quote = connection.ops.quote_name
    # The statuses named, not "<> 'processed'": a range scan of the partition's status
    # index each; and the keys probed by their ids, not a merge join that walks the whole
    # ledger's primary key (half a second at 10 million keys).
    others = ", ".join(
        f"'{status}'" for status in ProcessingStatus if status != "processed"
    )
    return f"""
WITH e AS MATERIALIZED (
    SELECT id, processing_status FROM {quote(partition)}
     WHERE processing_status IN ({others})
)
UPDATE {quote(_KEYS)} AS k SET final_status = e.processing_status FROM e
 WHERE k.inbox_event_id = e.id AND k.inbox_event_id = ANY(ARRAY(SELECT id FROM e))
"""  # noqa: S608 - table names from the models and the catalog, the statuses' values


# What holds an inbox partition back from retention (``partitions.partition_holds``), each
# a probe that stops at its first row: a row not finished, evidence of a conflict under
# investigation, a row of a paused or draining source, a row a live bulk replay may take.
# A bulk replay job that may still take a dead-lettered row: one of these states.
BULK_REPLAY_LIVE_STATES = (
    BulkReplayJob.State.QUEUED,
    BulkReplayJob.State.RUNNING,
    BulkReplayJob.State.PAUSED,
)


def partition_holds_sql(*, partition: str) -> str:
    quote = connection.ops.quote_name
    rows = quote(partition)
    unfinished = ", ".join(f"'{status}'" for status in RELAY_UNFINISHED_STATUSES)
    live_jobs = ", ".join(f"'{state}'" for state in BULK_REPLAY_LIVE_STATES)
    return f"""
SELECT EXISTS (SELECT 1 FROM {rows} WHERE processing_status IN ({unfinished})),
       EXISTS (SELECT 1 FROM {quote(FingerprintMismatch._meta.db_table)} m
                WHERE m.investigated_at IS NULL
                  AND EXISTS (SELECT 1 FROM {rows} e WHERE e.id = m.event_id)),
       EXISTS (SELECT 1 FROM {rows} e
                WHERE e.source_id IN (SELECT source_id FROM {quote(_HOLDS)})),
       EXISTS (SELECT 1 FROM {quote(BulkReplayJob._meta.db_table)}
                WHERE state IN ({live_jobs}))
       AND EXISTS (SELECT 1 FROM {rows} WHERE processing_status = 'dead_lettered')
"""  # noqa: S608 - table names from the models and the catalog


def partition_held_sources_sql(*, partition: str) -> str:
    """The paused or draining sources with a row in the inbox partition ``partition``, by
    slug: one probe of the partition's source index per held source."""
    quote = connection.ops.quote_name
    return f"""
SELECT s.id, s.slug FROM {quote(_HOLDS)} h JOIN {quote(_SOURCES)} s ON s.id = h.source_id
 WHERE EXISTS (SELECT 1 FROM {quote(partition)} e WHERE e.source_id = h.source_id)
 ORDER BY s.slug
"""  # noqa: S608 - table names from the models and the catalog


def partition_sizes_sql() -> str:
    """Each named table's estimated rows (``reltuples``: -1 until it is first analysed) and
    its size with its indexes and TOAST, from the catalog: nothing is counted or read. A
    name that is no table gives NULLs."""
    return """
SELECT n.name, c.reltuples, pg_total_relation_size(c.oid)
  FROM unnest(%s::text[]) AS n(name) LEFT JOIN pg_class c ON c.oid = to_regclass(n.name)
"""


# --- the deduplication ledger's horizon ---------------------------------------------------


@functools.cache
def key_purge_sql(vendor: str) -> str:
    """One batch of the ledger's purge (``ledger.inbox_keys_purge``): the keys of ids from
    ``%(first)s`` to ``%(last)s`` (a range scan of the ledger's primary key) received before
    ``%(before)s`` whose inbox row is gone. The row is looked up by its own primary key: on
    PostgreSQL ``(id, received_at)``, which its key carries, so that one partition's index is
    probed per key, and only the partitions before the bound are looked at."""
    quote = connection.ops.quote_name
    keys = quote(_KEYS)
    events = quote(_EVENTS)
    row = f"e.id = {keys}.inbox_event_id"
    if vendor == "postgresql":
        row += f" AND e.received_at = {keys}.received_at AND e.received_at < %(before)s"
    return f"""
DELETE FROM {keys}
 WHERE inbox_event_id >= %(first)s AND inbox_event_id <= %(last)s
   AND received_at < %(before)s
   AND NOT EXISTS (SELECT 1 FROM {events} AS e WHERE {row})
"""  # noqa: S608 - table names from the models


# --- reads ----------------------------------------------------------------------------------

# What a delivery's verification reads of its source (``selectors.webhook_source_snapshot``).
SNAPSHOT_SOURCE_FIELDS = (
    "id",
    "slug",
    "scheme",
    "handler",
    "timestamp_tolerance_seconds",
)


@functools.cache
def source_with_secrets_sql(vendor: str) -> str:
    """An enabled source by slug, with each of its secrets valid at the bound instant: one
    row per secret (one with NULLs when it has none)."""
    quote = connection.ops.quote_name
    source = quote(WebhookSource._meta.db_table)
    secret = quote(WebhookSecret._meta.db_table)
    columns = ", ".join(
        f"s.{quote(_field(WebhookSource, name).column)}"
        for name in SNAPSHOT_SOURCE_FIELDS
    )
    return (
        f"SELECT {columns}, k.secret, k.expires_at FROM {source} s"  # noqa: S608
        f" LEFT JOIN {secret} k ON k.source_id = s.id"
        " AND (k.expires_at IS NULL OR k.expires_at > %s)"
        " WHERE s.slug = %s AND s.is_enabled = %s"
    )


@functools.cache
def paused_sources_held_sql(vendor: str) -> str:
    """Per enabled source by slug, how many of its waiting events (the two bound statuses) a
    pause holds, counted up to the bound cap: 0 when it is not paused."""
    quote = connection.ops.quote_name
    return (
        f"SELECT s.slug, CASE WHEN h.paused_at IS NULL THEN 0 ELSE ("  # noqa: S608
        f" SELECT COUNT(*) FROM (SELECT 1 FROM {quote(_EVENTS)} e"
        " WHERE e.source_id = s.id AND e.processing_status IN (%s, %s) LIMIT %s"
        f") AS waiting) END FROM {quote(_SOURCES)} s"
        f" LEFT JOIN {quote(_HOLDS)} h ON h.source_id = s.id"
        " WHERE s.is_enabled = %s ORDER BY s.slug"
    )


@functools.cache
def event_types_sql(vendor: str, *, limit: int) -> str:
    """The inbox's distinct event types, up to ``limit``, by a loose index scan of
    ``(event_type, received_at)``: one index probe per type (a partition). No parameter: a
    connection prepares it and plans it once, where planning it over every partition costs
    more than running it (core/plans.py)."""
    table = connection.ops.quote_name(_EVENTS)
    limit = int(limit)
    return f"""
        WITH RECURSIVE types(event_type) AS (
            SELECT MIN(event_type) FROM {table}
            UNION ALL
            SELECT (SELECT e.event_type FROM {table} e
                    WHERE e.event_type > types.event_type
                    ORDER BY e.event_type LIMIT 1)
            FROM types WHERE types.event_type IS NOT NULL
        )
        SELECT event_type FROM types WHERE event_type IS NOT NULL LIMIT {limit}
    """  # noqa: S608 - the table name is the model's, the limit a whole number
