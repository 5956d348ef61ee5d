from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta
from typing import Any

from django.db import models
from django.db.models import Q
from django.db.models.expressions import Expression, Value
from django.utils import timezone
from django.utils.deconstruct import deconstructible


class AppendOnlyError(Exception):
    """A ledger row was about to be changed or deleted."""


class AppendOnlyQuerySet(models.QuerySet):
    """Bulk ``update()`` and ``delete()`` refuse on a ledger, as ``save`` and ``delete`` do."""

    def update(self, **kwargs):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only")

    def delete(self):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only")


class AppendOnlyManager(models.Manager.from_queryset(AppendOnlyQuerySet)):  # type: ignore[misc]
    pass


class BoundedQuerySet(models.QuerySet):
    """A queryset that may know bounds of its rows without reading them: a period of a time
    column that holds every one of them (``period_known``), and a number of rows they are
    more than (``more_than_known``). The admin's date hierarchy then offers that period's
    dates instead of reading the first and last row (``core.templatetags.admin_bounded``),
    and its capped count counts nothing it knows to be past the cap
    (``core.selectors.capped_count``; docs/console.md, "Finding things"). A selector that
    has bounded its rows sets them. Every queryset made from this one keeps the period (a
    filter only narrows the rows within it), none the number (a filter may leave fewer):
    that holds for this queryset alone, as a changelist's paginator counts it."""

    _periods: dict[str, tuple[Any, Any]] = {}
    _more_than = 0

    def period_known(self, field: str, first, last) -> BoundedQuerySet:
        """This queryset, knowing that every row's ``field`` lies from ``first`` to
        ``last`` (both included)."""
        clone = self.all()
        clone._periods = {**self._periods, field: (first, last)}
        return clone

    def known_period(self, field: str) -> tuple[Any, Any] | None:
        return self._periods.get(field)

    def more_than_known(self, rows: int) -> BoundedQuerySet:
        """This queryset, knowing that it holds more than ``rows`` rows (a queryset made
        from it does not know it)."""
        clone = self.all()
        clone._more_than = rows
        return clone

    def known_more_than(self) -> int:
        """A number of rows this queryset is known to hold more than (0: none known)."""
        return self._more_than

    def _clone(self):
        # Every queryset made from this one is made by this copy (Django's own, which
        # django-stubs does not declare).
        clone = super()._clone()  # type: ignore[misc]
        clone._periods = self._periods
        return clone


class AppendOnlyModel(models.Model):
    """A ledger row is written once: ``save`` of an existing row, ``delete``, and bulk
    ``update()``/``delete()`` through the ORM refuse. (The database itself is the audit
    trail's business: ``audit_verify`` detects what raw SQL changed.)"""

    objects = AppendOnlyManager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only")


_CONSTANT = re.compile(r"[a-z0-9_.]{1,64}")


class Constant(Value):
    """A constant of the code (a status), or a word a console filter offers among its
    choices (an event type), written into a statement itself, not sent beside it as a
    value: a statement whose only values are such constants has one plan, made for them,
    whatever runs it, and the console prepares it at its first run on a connection
    (core/plans.py), where a value has it planned anew at every load, over every partition
    of the inbox (docs/scaling.md, "At a year of daily partitions"). Only a short word of
    lowercase letters, digits, ``_`` and ``.``: anything else is refused, so that nothing
    that could end the literal or hold a quote is ever written in this way."""

    def __init__(self, value: str) -> None:
        word = str(value)
        if not _CONSTANT.fullmatch(word):
            raise ValueError(f"not a constant of the code: {word!r}")
        super().__init__(word, output_field=models.CharField())

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        return f"'{self.value}'", []


@deconstructible(path="core.models.TransactionTicket")
class TransactionTicket(Expression):
    """The id of the transaction that writes the row, as a column's database default
    (docs/subsystems/log.md, "The verifiable log"): PostgreSQL's ``pg_current_xact_id()`` (64
    bits, never wrapping). Once every transaction older than a snapshot's ``xmin`` has ended,
    no row with a smaller ticket can still appear: this is what lets the log's sealer take
    every ledger row, whatever its id, with no write to the row. SQLite writes NULL: its
    writers run one at a time, so ids are already in commit order there."""

    output_field = models.BigIntegerField()
    allowed_default = True

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        return "NULL", []

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        return "(pg_current_xact_id()::text::bigint)", []

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TransactionTicket)

    def __hash__(self) -> int:
        return hash(TransactionTicket)


def log_ticket_field() -> models.BigIntegerField:
    """The ``log_ticket`` column of a ledger the verifiable log takes in: set by the database
    when the row is inserted, never written afterwards (docs/subsystems/log.md, "The verifiable
    log")."""
    return models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        db_default=TransactionTicket(),
        help_text="The transaction that inserted the row (the log's sealer reads it).",
    )


def log_ticket_indexes(prefix: str) -> list[models.Index]:
    """The two indexes the sealer walks: rows by (ticket, id), and rows without a ticket (SQLite;
    on PostgreSQL the rows written before the column existed) by id. Each row is in one of
    them, and the ticket is never updated: no extra write, no extra row version."""
    return [
        models.Index(
            fields=["log_ticket", "id"],
            name=f"{prefix}_logt_idx",
            condition=Q(log_ticket__isnull=False),
        ),
        models.Index(
            fields=["id"],
            name=f"{prefix}_lognull_idx",
            condition=Q(log_ticket__isnull=True),
        ),
    ]


class BaseModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


def token_hash(token: str) -> str:
    """Tokens are 256-bit random strings, so one SHA-256 is enough to store them safely
    (a slow password hash would cost every API request and add nothing)."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_generate() -> str:
    return secrets.token_urlsafe(32)


class ApiRole(models.TextChoices):
    """What an API client may do (docs/http-api.md, "Roles"); ``core.permissions`` enforces
    it on every endpoint. ``ci`` is what every client could do before roles existed."""

    PRODUCER = "producer", "Producer: reads its events' status and the documents"
    CI = "ci", "CI/CD: triggers builds and deployments, reports their status"
    OPERATOR = (
        "operator",
        "Operator: the operator API (replays, sources, targets, keys)",
    )
    AUDITOR = "auditor", "Auditor: reads everything, changes nothing"


class ApiClient(BaseModel):
    """A caller of the /api/ endpoints (a CI system, an internal tool). Its token is stored hashed;
    only its first characters are kept to tell tokens apart. Its role is set by an operator
    (``api_client create --role``, the admin), never through the API."""

    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, editable=False)
    token_prefix = models.CharField(max_length=8, editable=False)
    is_active = models.BooleanField(default=True)
    role = models.CharField(max_length=16, choices=ApiRole.choices, default=ApiRole.CI)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name"], name="core_apiclient_name_uniq"),
            models.UniqueConstraint(
                fields=["token_hash"], name="core_apiclient_token_hash_uniq"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    # DRF's IsAuthenticated asks the authenticated principal this.
    @property
    def is_authenticated(self) -> bool:
        return True


class WorkerHeartbeat(models.Model):
    """Written by the worker when asked to (``worker_ping``): proof that a task went from the
    broker through a worker process into the database."""

    token = models.CharField(max_length=64)
    hostname = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["token"], name="core_workerheartbeat_token_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.hostname} {self.created_at:%Y-%m-%d %H:%M:%S}"


class RelayHeartbeat(models.Model):
    """One outbox relay (a thread of a worker process), as it last reported itself: how
    ``/metrics`` and ``/readyz`` tell how many relays are alive and which one publishes, how
    the relay that publishes learns how many worker processes it publishes for, and how a
    standing-by relay tells that the one publishing went silent (docs/subsystems/relay.md, "One
    relay publishes at a time")."""

    relay_id = models.CharField(max_length=255)
    started_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()
    published = models.BigIntegerField(default=0)
    # Whether the relay was publishing when it last reported (it held the active relay's
    # lock, or no lock applies); a relay standing by reports false.
    active = models.BooleanField(default=True, db_default=True)
    # The processes of its worker's pool (0: a relay apart from any worker).
    processes = models.PositiveIntegerField(default=1, db_default=1)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["relay_id"], name="core_relayheartbeat_relay_uniq"
            ),
        ]

    def __str__(self) -> str:
        return self.relay_id

    # A relay silent for this long is gone (its process ended): its row is dropped, so that
    # worker restarts do not pile rows up.
    FORGET_AFTER = timedelta(days=1)

    @classmethod
    def beat(
        cls,
        *,
        relay_id: str,
        published: int,
        active: bool = True,
        processes: int = 1,
    ) -> None:
        now = timezone.now()
        cls.objects.update_or_create(
            relay_id=relay_id,
            defaults={
                "last_seen_at": now,
                "published": published,
                "active": active,
                "processes": processes,
            },
        )
        cls.objects.filter(last_seen_at__lt=now - cls.FORGET_AFTER).delete()
