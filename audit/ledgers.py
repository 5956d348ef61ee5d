"""The ledgers the verifiable log takes in (docs/security.md, "What the log holds"): one entry
per kind of record, saying which table holds it, which of its fields make its leaf, when a
row may be logged, and which stories (evidence bundles) it belongs to.

A leaf is the canonical JSON of a record's immutable fields with its ``"kind"`` and ``"id"``
(``audit.leaves``). The fields here are the ones the product writes once: the state that
legitimately changes afterwards (an inbox row's processing status, a deployment's status, a
mismatch's investigation) is left out, and is checked against what the log does hold
(``audit.verification``).

Most kinds are taken by the sealer (``audit.sealer``), which finds the rows not yet logged
through their ``log_ticket`` column (``core.models.log_ticket_field``). Two are written by
whoever makes them: ``body_purge`` and ``evidence_purge`` (one per purged body of an inbox
row or of a mismatch's evidence, appended by the purge itself in the transaction that drops the
body, so that a purge excuses a missing body only if the log held it first) and the entries of
the retired HMAC chain (``audit_seal``, ``audit_chain_retired``, appended once by the sealer's
first round).

Adding a ledger is one entry in ``LEDGERS`` (and the ``log_ticket`` column on its model)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.apps import apps
from django.db import connection
from django.db.models import (
    BigIntegerField,
    Case,
    DateTimeField,
    Expression,
    F,
    Func,
    Model,
    Q,
    QuerySet,
    TextField,
    When,
)
from django.db.models.functions import Coalesce

from .leaves import LeafInput

__all__ = [
    "BODY_PURGE",
    "CHAIN_RETIRED",
    "EVIDENCE_PURGE",
    "LEDGERS",
    "PARTITION_DROP",
    "SEAL",
    "Ledger",
    "leaf_value",
    "ledger_for_model",
    "scanned_ledgers",
]

# Kinds logged by their writer, not found by the sealer.
BODY_PURGE = "body_purge"
EVIDENCE_PURGE = "evidence_purge"
SEAL = "audit_seal"
CHAIN_RETIRED = "audit_chain_retired"
# A day of the inbox dropped by retention, its id the operator action's: appended by the
# drop itself (audit.sealer.partition_drop_log); the rows it names may be gone
# (audit.verification).
PARTITION_DROP = "inbox_partition_drop"


# Values a leaf holds as they are read (checked by exact type: the common case, fast).
_AS_IS = frozenset({str, int, bool, float, type(None), dict, list})


def leaf_value(value: Any) -> Any:
    """A stored value as a leaf holds it: instants as ISO 8601 text in UTC with microseconds,
    addresses as text, JSON as it is."""
    if type(value) in _AS_IS:
        return value
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if isinstance(value, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    return value


class LeafTime(Func):
    """An instant as a leaf writes it, read as text: ``2026-11-30T12:00:00.000000+00:00``
    (what ``leaf_value`` makes of a datetime). PostgreSQL formats it itself: nothing is
    parsed into a Python datetime, and an instant Python cannot hold (stored by an older
    version: a year before 1, written with " BC", or after 9999, or "infinity") is logged
    all the same. Elsewhere
    (SQLite) the stored text is read and normalised by ``leaf_time_text``."""

    output_field = TextField()

    def as_sql(  # type: ignore[override]
        self, compiler: Any, connection: Any, **extra: Any
    ) -> tuple[str, list[Any]]:
        sql, params = compiler.compile(self.source_expressions[0])
        return f"CAST(({sql}) AS TEXT)", list(params)

    def as_postgresql(
        self, compiler: Any, connection: Any, **extra: Any
    ) -> tuple[str, list[Any]]:
        sql, params = compiler.compile(self.source_expressions[0])
        text = (
            f"CASE WHEN isfinite({sql}) THEN to_char(({sql}) AT TIME ZONE 'UTC', "
            '\'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"\')'
            f" || CASE WHEN ({sql}) < '0001-01-01' THEN ' BC' ELSE '' END"
            f" ELSE ({sql})::text END"
        )
        return f"({text})", [*params, *params, *params, *params]


def leaf_time_text(value: Any) -> Any:
    """The stored text of an instant (SQLite: UTC, without an offset) as ``LeafTime`` writes
    it; text that is not an instant stays as it is."""
    if not isinstance(value, str) or value.endswith(("+00:00", " BC")):
        return value
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


# Computes fields that another table holds, for a batch of leaves' field dicts (each with
# the row's own fields under their leaf names), in place.
Derive = Callable[[list[dict[str, Any]]], None]


@dataclass(frozen=True)
class Ledger:
    """One kind of record in the log.

    ``fields`` maps each leaf key to the ORM path it is read from (``"source_id"``,
    ``"document__entity_id"``), or to an expression. ``record`` names the column that holds
    the record's id where a row may have one other than its primary key (null: its primary
    key); ``created`` is the row's creation time: a row younger than
    ``AUDIT_SEAL_HORIZON_SECONDS`` waits. ``ready`` says which rows are complete (an attempt
    once closed); ``None``: every row, as inserted. ``ready_at`` is when a row became ready
    (default ``created``): verification names a ready row older than the horizon by that
    time that is not in the log. ``belongs_to`` maps a story (``audit.stories``) to the
    field naming the record it belongs to. ``scanned``: the sealer takes its rows (False for
    kinds logged by their writer). ``derive`` adds fields held elsewhere (computed again by
    verification). ``optional`` names fields added to a kind after rows of it were logged:
    a leaf holds one only when it is not null, so that a leaf logged before the field
    existed is still the leaf its row gives."""

    kind: str
    model: str
    fields: Mapping[str, str | Expression]
    created: str
    ready: Q | None = None
    ready_at: str = ""
    belongs_to: Mapping[str, str] = field(default_factory=dict)
    scanned: bool = True
    derive: Derive | None = None
    label: str = ""
    record: str = ""
    optional: frozenset[str] = frozenset()

    @property
    def model_class(self) -> type[Model]:
        return apps.get_model(self.model)

    @property
    def ready_time(self) -> str:
        return self.ready_at or self.created

    @property
    def title(self) -> str:
        """How messages name one of its records: "inbox event 12"."""
        return self.label or self.kind.replace("_", " ")

    def record_id(self) -> Expression | F:
        """The record's id in the log, as a query reads it."""
        if not self.record:
            return F("pk")
        return Coalesce(F(self.record), F("pk"), output_field=BigIntegerField())

    def with_record_id(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """``log_record_id``: each row's record id in the log."""
        return queryset.annotate(log_record_id=self.record_id())

    def of_records(self, queryset: QuerySet[Any], ids: list[int]) -> QuerySet[Any]:
        """The rows whose record ids are ``ids``, each through an index."""
        if not self.record:
            return queryset.filter(pk__in=ids)
        return queryset.filter(
            Q(**{f"{self.record}__in": ids})
            | Q(**{f"{self.record}__isnull": True, "pk__in": ids})
        )

    def _is_time(self, path: str | Expression) -> bool:
        if not isinstance(path, str) or "__" in path:
            return False
        field = self.model_class._meta.get_field(path)
        return isinstance(field, DateTimeField)

    def columns(self) -> list[str | Expression]:
        """What ``values_list`` reads for the leaf's fields, in their order: instants as
        ``LeafTime`` text."""
        return [
            LeafTime(F(path)) if isinstance(path, str) and self._is_time(path) else path
            for path in self.fields.values()
        ]

    def leaf_fields(self, rows: Iterable[tuple[Any, ...]]) -> list[dict[str, Any]]:
        """The leaf fields of rows read as ``values_list(*columns())``."""
        keys = tuple(self.fields)
        value = leaf_value
        built = [dict(zip(keys, map(value, row), strict=True)) for row in rows]
        if connection.vendor != "postgresql":
            times = [k for k, path in self.fields.items() if self._is_time(path)]
            for fields in built:
                for key in times:
                    fields[key] = leaf_time_text(fields[key])
        if self.derive is not None and built:
            self.derive(built)
        for key in self.optional:
            for fields in built:
                if fields[key] is None:
                    del fields[key]
        return built

    def leaf(self, record_id: int, fields: Mapping[str, Any]) -> LeafInput:
        return LeafInput(kind=self.kind, record_id=record_id, fields=fields)


def _secret_ids(rows: list[dict[str, Any]]) -> None:
    """Which of its source's secrets verified each event, by id, from the fingerprint the
    event recorded at ingest (``WebhookSecret.fingerprint``; none for older rows)."""
    secret_model = apps.get_model("webhooks", "WebhookSecret")
    wanted = {(r["source_id"], r["secret_fingerprint"]) for r in rows}
    fingerprints = {f for _, f in wanted if f}
    ids: dict[tuple[int, str], int] = {}
    if fingerprints:
        for pk, source_id, fingerprint in (
            secret_model.objects.filter(fingerprint__in=fingerprints)
            .order_by("pk")
            .values_list("pk", "source_id", "fingerprint")
        ):
            ids.setdefault((source_id, fingerprint), pk)
    for row in rows:
        row["secret_id"] = ids.get((row["source_id"], row["secret_fingerprint"]))


def _job_of_kind(kind: str) -> Case:
    """The id of a row's job under the name its leaf gave it when deployments and builds had
    tables of their own (``deployment_id``, ``build_id``): its record id if the job is of
    ``kind``, else null."""
    return Case(
        When(
            job__kind=kind,
            then=Coalesce(
                F("job__ledger_id"), F("job_id"), output_field=BigIntegerField()
            ),
        ),
        default=None,
        output_field=BigIntegerField(),
    )


_JOB_FIELDS: dict[str, str | Expression] = {
    "public_id": "public_id",
    "client_id": "client_id",
    "idempotency_key": "idempotency_key",
    "repository": "repository",
    "commit_sha": "commit_sha",
    "workflow": "workflow",
    "triggered_by": "triggered_by",
    "created_at": "created_at",
}

# Kind -> its ledger, in the order a sealing round takes them: a record before the records
# that refer to it (an event before its attempts and its revision, a job before its
# transitions).
LEDGERS: dict[str, Ledger] = {
    ledger.kind: ledger
    for ledger in (
        Ledger(
            kind="inbox_event",
            model="webhooks.InboxEvent",
            fields={
                "source_id": "source_id",
                "event_id": "event_id",
                "event_type": "event_type",
                "entity_id": "entity_id",
                "entity_type": "entity_type",
                "source_version": "source_version",
                "occurred_at": "occurred_at",
                "tenant_id": "tenant_id",
                "idempotency_key": "idempotency_key",
                "payload_hash": "payload_hash",
                "content_fingerprint": "content_fingerprint",
                "body_key": "body_key",
                "headers": "headers",
                "signature_valid": "signature_valid",
                "secret_fingerprint": "secret_fingerprint",
                "remote_addr": "remote_addr",
                "received_at": "received_at",
            },
            created="received_at",
            derive=_secret_ids,
        ),
        Ledger(
            kind="fingerprint_mismatch",
            model="webhooks.FingerprintMismatch",
            fields={
                "inbox_event_id": "event_id",
                "conflicting_payload_hash": "conflicting_payload_hash",
                "original_fingerprint": "original_fingerprint",
                "conflicting_fingerprint": "conflicting_fingerprint",
                "headers": "headers",
                "remote_addr": "remote_addr",
                "received_at": "received_at",
            },
            created="received_at",
            belongs_to={"inbox_event": "event_id"},
        ),
        Ledger(
            kind="inbox_attempt",
            model="webhooks.InboxAttempt",
            fields={
                "inbox_event_id": "event_id",
                "number": "number",
                "started_at": "started_at",
                "finished_at": "finished_at",
                "outcome": "outcome",
                "resulting_status": "resulting_status",
                "error": "error",
                "worker": "worker",
            },
            created="started_at",
            ready=Q(finished_at__isnull=False),
            ready_at="finished_at",
            belongs_to={"inbox_event": "event_id"},
        ),
        Ledger(
            kind="document_revision",
            model="research.DocumentRevision",
            fields={
                "document_id": "document_id",
                "entity_id": "document__entity_id",
                "inbox_event_id": "inbox_event_id",
                "event_id": "event_id",
                "change": "kind",
                "source_version": "source_version",
                "occurred_at": "occurred_at",
                "content_hash": "content_hash",
                "snapshot": "snapshot",
                "applied_at": "applied_at",
            },
            created="applied_at",
            belongs_to={
                "research_document": "document_id",
                "inbox_event": "inbox_event_id",
            },
        ),
        Ledger(
            kind="deployment",
            model="deployments.Deployment",
            fields={**_JOB_FIELDS, "environment": "environment"},
            created="created_at",
        ),
        Ledger(
            kind="build",
            model="deployments.Build",
            fields={**_JOB_FIELDS, "ref": "ref"},
            created="created_at",
            # A build moved from the builds' own table keeps its id there (migration 0009).
            record="ledger_id",
        ),
        Ledger(
            kind="job_transition",
            model="deployments.JobTransition",
            fields={
                "deployment_id": _job_of_kind("deployment"),
                "build_id": _job_of_kind("build"),
                "from_status": "from_status",
                "to_status": "to_status",
                "at": "at",
                "actor": "actor",
                "detail": "detail",
                "recorded_at": "recorded_at",
            },
            created="recorded_at",
            belongs_to={"deployment": "job_id"},
        ),
        Ledger(
            kind="status_sync",
            model="deployments.StatusSync",
            fields={
                "public_id": "public_id",
                "client_id": "client_id",
                "deployment_id": _job_of_kind("deployment"),
                "build_id": _job_of_kind("build"),
                "status": "status",
                "reported_at": "reported_at",
                "detail": "detail",
                "applied": "applied",
                "resulting_status": "resulting_status",
                "created_at": "created_at",
            },
            created="created_at",
            belongs_to={"deployment": "job_id"},
        ),
        # An attempt to trigger a job downstream, once closed (an open one is still being
        # made: its outcome is not known yet).
        Ledger(
            kind="trigger_attempt",
            model="deployments.TriggerAttempt",
            fields={
                "deployment_id": _job_of_kind("deployment"),
                "build_id": _job_of_kind("build"),
                "number": "number",
                "executor": "executor",
                "target_name": "target_name",
                "url": "url",
                "started_at": "started_at",
                "finished_at": "finished_at",
                "outcome": "outcome",
                "status_code": "status_code",
                "error_class": "error_class",
                "error": "error",
                "duration_seconds": "duration_seconds",
                "retry_at": "retry_at",
                "worker": "worker",
                "downstream": "downstream",
            },
            created="started_at",
            ready=Q(finished_at__isnull=False),
            ready_at="finished_at",
            belongs_to={"deployment": "job_id"},
            optional=frozenset({"downstream"}),
        ),
        Ledger(
            kind="operator_action",
            model="trail.OperatorAction",
            fields={
                "action": "action",
                "actor_id": "actor_id",
                "actor_name": "actor_name",
                "reason": "reason",
                "event_ids": "event_ids",
                "event_count": "event_count",
                "skipped_count": "skipped_count",
                "details": "details",
                "bulk_job_id": "bulk_job_id",
                "created_at": "created_at",
            },
            created="created_at",
        ),
        # One per purged body, its id the inbox row's, its fields the purge's stamp and
        # operator action: appended by the purge itself (audit.sealer.body_purges_log),
        # checked against the row's body_purged_at and that action (audit.verification).
        Ledger(
            kind=BODY_PURGE,
            model="webhooks.InboxEvent",
            fields={},
            created="body_purged_at",
            belongs_to={"inbox_event": "pk"},
            scanned=False,
        ),
        # The same for the conflicting body of a mismatch's evidence, its id the mismatch's
        # (a ``purge_evidence_bodies`` operator action).
        Ledger(
            kind=EVIDENCE_PURGE,
            model="webhooks.FingerprintMismatch",
            fields={},
            created="body_purged_at",
            belongs_to={"inbox_event": "event_id"},
            scanned=False,
        ),
        # The retired HMAC chain, appended once (audit.sealer.hmac_chain_retire).
        Ledger(
            kind=SEAL,
            model="audit.AuditSeal",
            fields={
                "sequence": "sequence",
                "version": "version",
                "previous_hash": "previous_hash",
                "rows_hash": "rows_hash",
                "row_count": "row_count",
                "first_event_id": "first_event_id",
                "last_event_id": "last_event_id",
                "actions_hash": "actions_hash",
                "action_count": "action_count",
                "first_action_id": "first_action_id",
                "last_action_id": "last_action_id",
                "horizon": "horizon",
                "seal_hash": "seal_hash",
                "created_at": "created_at",
            },
            created="created_at",
            scanned=False,
            label="HMAC seal",
        ),
    )
}


def scanned_ledgers() -> list[Ledger]:
    return [ledger for ledger in LEDGERS.values() if ledger.scanned]


def ledger_for_model(model: type[Model]) -> Ledger | None:
    """The ledger whose records a model's rows are: the ledger of the model itself (a
    deployment's and a build's are two, of one table), else of its table."""
    ledgers = scanned_ledgers()
    for ledger in ledgers:
        if ledger.model_class is model:
            return ledger
    concrete = model._meta.concrete_model
    for ledger in ledgers:
        if ledger.model_class is concrete:
            return ledger
    return None
