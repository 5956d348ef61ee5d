from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import Exact
from django.utils import timezone

from core.models import (
    ApiClient,
    BoundedQuerySet,
    log_ticket_field,
    log_ticket_indexes,
)

from .integrations import integration_choices
from .pacing import finish_estimate, measured_rate, pace_for
from .schemes import DEFAULT_SCHEME, scheme_choices, secret_fingerprint

# ``whpk_`` and the base64 of 32 bytes (``schemes.public_key_parse``).
PUBLIC_KEY_STORED_LENGTH = 49
# Below a minute is finer than metrics are scraped and alerts evaluated.
MIN_EXPECTED_DELIVERY_INTERVAL_SECONDS = 60


class WebhookSource(models.Model):
    """A producer that POSTs to /webhooks/<slug>/, with its scheme, handler and secrets."""

    # No index of its own: the unique constraint on it is one.
    slug = models.SlugField(max_length=64, db_index=False)
    # Both from their registries: a new scheme or integration needs no migration.
    scheme = models.CharField(
        max_length=32, choices=scheme_choices, default=DEFAULT_SCHEME
    )
    handler = models.CharField(
        max_length=32,
        choices=integration_choices,
        help_text="The integration that reads and applies this source's events.",
    )
    timestamp_tolerance_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Overrides WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS.",
    )
    is_enabled = models.BooleanField(default=True)
    # Read by the "no delivery" alert (docs/runbook.md, WebhookSourceSilent) through the
    # scrape-time gauges of webhooks.metrics; nothing in the product acts on it.
    expected_delivery_interval_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(MIN_EXPECTED_DELIVERY_INTERVAL_SECONDS)],
        verbose_name="expected delivery interval (seconds)",
        help_text=(
            "Alert when no new event arrived from this source for longer than this. "
            "Empty: never alert. At least 60."
        ),
    )
    # A GitHub source bound to an API client moves that client's deployments only; unbound, it
    # moves any client's (one tenant: docs/security.md, "GitHub statuses and API clients").
    client = models.ForeignKey(
        ApiClient,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        verbose_name="API client",
        help_text=(
            "GitHub sources: the API client whose deployments this source's statuses may "
            "move. Empty: any client's (a single tenant)."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["slug"], name="webhooks_source_slug_uniq"),
            models.CheckConstraint(
                condition=Q(expected_delivery_interval_seconds__isnull=True)
                | Q(
                    expected_delivery_interval_seconds__gte=(
                        MIN_EXPECTED_DELIVERY_INTERVAL_SECONDS
                    )
                ),
                name="webhooks_source_expected_interval_min",
            ),
        ]
        permissions = [
            ("rotate_secret", "Can rotate webhook source secrets"),
            ("pause_source", "Can pause and resume webhook sources"),
            ("enable_source", "Can enable and disable webhook sources"),
        ]

    def __str__(self) -> str:
        return self.slug

    @property
    def current_hold(self) -> SourceHold | None:
        """The source's hold while it is paused or draining, else ``None``. Read from the
        database unless the query selected it (``select_related("hold")``)."""
        try:
            return self.hold
        except SourceHold.DoesNotExist:
            return None


class SourceHold(models.Model):
    """A source whose events are held back (docs/subsystems/relay.md, "Pausing a source"):
    paused by an operator, or draining after a resume. One row per held source and none for
    the others: the row is created by a pause, turned into a drain by the resume, and deleted
    when the drain has released everything.

    Ingest never reads or references this table: a pause, a resume and every drain round lock
    this row only, never the source's, which each delivery's foreign key check reads.

    Draining: the relays release the held events in id order, at most ``drain_rate`` per
    second (none: as fast as they claim), spending ``drain_tokens`` (refilled from
    ``drain_tokens_at``, at most one second's worth) under this row's lock."""

    source = models.OneToOneField(
        WebhookSource, on_delete=models.CASCADE, primary_key=True, related_name="hold"
    )
    paused_at = models.DateTimeField("paused since", null=True, blank=True)
    paused_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    paused_by_name = models.CharField(
        "paused by", max_length=255, blank=True, default=""
    )
    pause_reason = models.TextField(blank=True, default="")
    drain_started_at = models.DateTimeField("draining since", null=True, blank=True)
    drain_rate = models.FloatField(
        null=True, blank=True, help_text="Events per second; empty: no limit."
    )
    drain_released = models.PositiveBigIntegerField(
        default=0, help_text="Events released since the drain started."
    )
    drain_tokens = models.FloatField(default=0)
    drain_tokens_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # Paused or draining, exactly one: a pause ends a drain, a resume starts one.
            models.CheckConstraint(
                condition=Q(paused_at__isnull=False, drain_started_at__isnull=True)
                | Q(paused_at__isnull=True, drain_started_at__isnull=False),
                name="webhooks_hold_paused_xor_draining",
            ),
            models.CheckConstraint(
                condition=Q(drain_rate__isnull=True) | Q(drain_rate__gt=0),
                name="webhooks_hold_drain_rate_positive",
            ),
        ]

    def __str__(self) -> str:
        state = "paused" if self.paused_at is not None else "draining"
        return f"{state} source {self.source_id}"


class WebhookSecret(models.Model):
    """One signing secret of a source, or the public key of a producer that signs with its
    private key (Standard Webhooks ``v1a``, ``kind`` says which). Several are valid at once
    during a rotation: the old one until ``expires_at``, the new one with no expiry. A secret
    is never displayed after creation; a public key is not a secret, and the admin shows it.
    A source holds one kind: its rotations keep to it (``webhooks.sources``)."""

    class Kind(models.TextChoices):
        SECRET = "secret"  # noqa: S105 - a kind's name
        PUBLIC_KEY = "public_key", "public key"

    # No index of its own: ``webhooks_secret_valid_idx`` leads with it.
    source = models.ForeignKey(
        WebhookSource, on_delete=models.CASCADE, related_name="secrets", db_index=False
    )
    # The secret, or the public key as ``whpk_`` + base64 of its 32 bytes
    # (``schemes.public_key_parse``); the verifier tells them apart by that prefix.
    secret = models.CharField(max_length=255)
    # A database default as well: rows stored before public keys were held are secrets.
    kind = models.CharField(
        max_length=16, choices=Kind.choices, default=Kind.SECRET, db_default=Kind.SECRET
    )
    # Names the secret without revealing it (``schemes.secret_fingerprint``): what an inbox
    # row records of the secret that verified it, and what evidence bundles show.
    fingerprint = models.CharField(
        max_length=16, blank=True, default="", editable=False
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # What the admin shows as a public key is one: never a secret shown by mistake.
            models.CheckConstraint(
                condition=Q(kind="secret")
                | Q(
                    Exact(Length("secret"), PUBLIC_KEY_STORED_LENGTH),
                    kind="public_key",
                    secret__startswith="whpk_",  # noqa: S106 - a prefix
                ),
                name="webhooks_secret_public_key_shape",
            ),
        ]
        indexes = [
            models.Index(
                fields=["source", "expires_at"], name="webhooks_secret_valid_idx"
            )
        ]

    def __str__(self) -> str:
        if self.kind == self.Kind.PUBLIC_KEY:
            return f"public key {self.fingerprint} of {self.source_id}"
        return f"secret #{self.pk} of {self.source_id}"

    def __repr__(self) -> str:
        return f"<WebhookSecret {self.pk} source={self.source_id}>"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.fingerprint = secret_fingerprint(self.secret)
        super().save(*args, **kwargs)


class ProcessingStatus(models.TextChoices):
    RECEIVED = "received"
    PROCESSING = "processing"
    PROCESSED = "processed"
    IGNORED_OUT_OF_ORDER = "ignored_out_of_order"
    IGNORED_DUPLICATE_VERSION = "ignored_duplicate_version"
    IGNORED_UNSUPPORTED = "ignored_unsupported"
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"


class DeadLetterCause(models.TextChoices):
    """Why a row was dead-lettered, in words an API client may read (docs/security.md,
    "Error text"); the full error stays in ``error_message``, for the admin."""

    REJECTED = "rejected", "the event's data was rejected"
    EXHAUSTED = "exhausted", "processing failed on every attempt"
    # Rows dead-lettered before causes were recorded (migration 0014 names them so).
    UNRECORDED = "unrecorded", "the cause was not recorded"


# What an operator may replay: back to ``received`` with a fresh round of attempts.
REPLAYABLE_STATUSES = (ProcessingStatus.DEAD_LETTERED, ProcessingStatus.FAILED)

# The dead-letter causes a replay meets again: it sends the same bytes to the same handler,
# which rejects them again unless the handler changed since (a permanent error: invalid
# data, a value the database refuses, a row that cannot be read). An exhausted event (its
# dependency was down, say) is what a replay is for.
REPLAY_REPEATS_CAUSES = frozenset({DeadLetterCause.REJECTED})

TERMINAL_STATUSES = frozenset(
    {
        ProcessingStatus.PROCESSED,
        ProcessingStatus.IGNORED_OUT_OF_ORDER,
        ProcessingStatus.IGNORED_DUPLICATE_VERSION,
        ProcessingStatus.IGNORED_UNSUPPORTED,
        ProcessingStatus.DEAD_LETTERED,
    }
)


class InboxEvent(models.Model):
    """One row per (source, event_id): the durable inbox and the outbox of the processing task.

    The raw body is stored as received and never re-serialised; only ``purge_inbox`` may drop it
    (``body_purged_at``) from old terminal rows, keeping the metadata."""

    # No index of its own: every lookup by source is served by an index that starts with
    # it (the unique (source, event_id), and (source, received_at)); one index fewer for
    # every insert and every status change to maintain.
    source = models.ForeignKey(
        WebhookSource, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    event_id = models.CharField(max_length=128)
    event_type = models.CharField(max_length=128)
    entity_id = models.CharField(max_length=128, blank=True, default="")
    entity_type = models.CharField(max_length=128, blank=True, default="")
    source_version = models.BigIntegerField(null=True, blank=True)
    occurred_at = models.DateTimeField(null=True, blank=True)
    tenant_id = models.CharField(max_length=128, blank=True, default="")
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    payload_hash = models.CharField(max_length=64)
    content_fingerprint = models.CharField(max_length=64)
    # The payload hash again, on rows whose event id is not signed (GitHub's delivery id):
    # unique per source, so that the signed body sent again under a fresh id is a duplicate
    # of this row. NULL (not "", which would collide) when the id is signed, and on copies
    # stored before the key existed.
    body_key = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    raw_body = models.BinaryField(null=True)
    body_purged_at = models.DateTimeField(null=True, blank=True)
    headers = models.JSONField(default=dict)
    signature_valid = models.BooleanField(default=True)
    # The fingerprint of the source's secret that verified the signature
    # (``WebhookSecret.fingerprint``), never the secret; "" on rows stored before it was kept.
    # A database default as well: the ingest upsert names its columns.
    secret_fingerprint = models.CharField(
        max_length=16, blank=True, default="", db_default=""
    )
    remote_addr = models.GenericIPAddressField(null=True, blank=True)
    received_at = models.DateTimeField(default=timezone.now)
    processed_at = models.DateTimeField(null=True, blank=True)
    processing_status = models.CharField(
        max_length=32,
        choices=ProcessingStatus.choices,
        default=ProcessingStatus.RECEIVED,
    )
    http_status = models.PositiveSmallIntegerField(default=202)
    error_message = models.TextField(blank=True, default="")
    # A database default as well: the ingest upsert names its columns and leaves this out.
    dead_letter_cause = models.CharField(
        max_length=16,
        choices=DeadLetterCause.choices,
        blank=True,
        default="",
        db_default="",
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    delivery_count = models.PositiveIntegerField(default=1)
    last_seen_at = models.DateTimeField(default=timezone.now)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # Set aside by the relay while its source is paused or draining (docs/subsystems/relay.md,
    # "Pausing a source"): out of the outbox's partial indexes, so that a long pause never
    # makes a claim walk past its rows; cleared when the drain releases the row.
    held_at = models.DateTimeField(null=True, blank=True)
    # The W3C traceparent of the request that wrote the row (core/tracing.py), written by the
    # ingest upsert itself; a replay sets the replaying request's or job's. "" when tracing
    # is off. Not evidence: no leaf of the verifiable log holds it. A database default: the
    # ingest upsert names its columns and leaves this out when it has none.
    traceparent = models.CharField(
        max_length=55, blank=True, default="", db_default="", editable=False
    )
    log_ticket = log_ticket_field()

    # A search knows the days its rows lie in (``selectors.inbox_events_search``).
    objects = BoundedQuerySet.as_manager()

    class Meta:
        # No unique constraint: the deduplication ledger (``InboxKey``) decides new,
        # duplicate and conflict, written by the same statement as the row.
        indexes = [
            # The relay (webhooks.outbox): new rows waiting for their first message, and
            # retries waiting for theirs; each index holds only such rows, so a claim is an
            # index probe however large the inbox grows. Rows set aside for a paused source
            # leave both for the third, by source in id order (what a drain reads).
            models.Index(
                fields=["id"],
                name="webhooks_inbox_outbox_idx",
                condition=Q(
                    processing_status="received",
                    dispatched_at__isnull=True,
                    held_at__isnull=True,
                ),
            ),
            models.Index(
                fields=["next_attempt_at"],
                name="webhooks_inbox_retry_idx",
                condition=Q(
                    processing_status="failed",
                    dispatched_at__isnull=True,
                    held_at__isnull=True,
                ),
            ),
            models.Index(
                fields=["source", "id"],
                name="webhooks_inbox_held_idx",
                condition=Q(held_at__isnull=False),
            ),
            models.Index(fields=["-received_at"], name="webhooks_inbox_received_idx"),
            # The admin's status filter, and the relay's sweep (the rows of its three
            # statuses, a range of received times for ``received``): every version of an
            # event's row that an index holds is one more entry to write, so the sweep,
            # every RELAY_SWEEP_INTERVAL_SECONDS, reads this one rather than one of its own.
            models.Index(
                fields=["processing_status", "-received_at"],
                name="webhooks_inbox_status_idx",
            ),
            models.Index(
                fields=["source", "-received_at"], name="webhooks_inbox_source_idx"
            ),
            models.Index(
                fields=["event_type", "-received_at"], name="webhooks_inbox_type_idx"
            ),
            # Equality and prefix (``LIKE 'evt_doc%'``, the console's search) lookups of an
            # event or entity id: the pattern operator class serves both whatever the
            # database's collation. Each holds the received time too (PostgreSQL only,
            # ``webhooks.0038``): the search reads the first and last received time of the
            # rows it finds from the index alone (``selectors.inbox_events_search``).
            models.Index(
                fields=["entity_id"],
                name="webhooks_inbox_entity_like",
                opclasses=["varchar_pattern_ops"],
                include=["received_at"],
            ),
            models.Index(
                fields=["event_id"],
                name="webhooks_inbox_event_id_like",
                opclasses=["varchar_pattern_ops"],
                include=["received_at"],
            ),
            *log_ticket_indexes("webhooks_inbox"),
        ]
        permissions = [("replay_inboxevent", "Can replay dead-lettered inbox events")]

    def __str__(self) -> str:
        return self.event_id


class InboxKey(models.Model):
    """The deduplication ledger (docs/subsystems/inbox.md, "The deduplication ledger"): one
    slim row per (source, event_id) accepted, sharing its inbox row's id, written by the one
    statement that records a delivery (``statements.inbox_record_sql``). Its unique indexes,
    not the inbox's, decide whether a delivery is new, a duplicate or a conflict, so that the
    answers stay the same however the inbox row is stored, and once it has left.

    ``delivery_count`` counts every delivery, duplicates included (the inbox row carries the
    same count for the console); ``body_key`` is the inbox row's (unique per source when
    set: the same signed bytes under a fresh id are a duplicate)."""

    inbox_event = models.OneToOneField(
        InboxEvent,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        # The key outlives its row: nothing in the database ties them but the id.
        db_constraint=False,
        related_name="key",
    )
    # No index of its own: the unique (source, event_id) serves every lookup by source.
    source = models.ForeignKey(
        WebhookSource, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    event_id = models.CharField(max_length=128)
    body_key = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    # The content's fingerprint as the 32 bytes of its SHA-256 (``webhooks.0037``): what a
    # later delivery under the same id is compared with, after the row has left too. Keys
    # written before 0037 hold it as its 64 hex characters in ``content_fingerprint`` (this
    # column NULL), read the same way until the ledger's horizon takes them
    # (docs/subsystems/inbox.md, "The deduplication ledger"). Read ``fingerprint``.
    content_digest = models.BinaryField(max_length=32, null=True)
    content_fingerprint = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    received_at = models.DateTimeField()
    delivery_count = models.PositiveIntegerField(default=1)
    # The status the row had when retention dropped it with its day's partition, unless it
    # was ``processed`` (most rows: blank then, and left unwritten). What a duplicate of an
    # event whose row has left is answered. A database default: ingest leaves it out.
    final_status = models.CharField(
        max_length=32, blank=True, default="", db_default=""
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "event_id"], name="webhooks_key_source_event_uniq"
            ),
            # Partial: rows whose id is signed (the research events) never enter it.
            models.UniqueConstraint(
                fields=["source", "body_key"],
                condition=Q(body_key__isnull=False),
                name="webhooks_key_source_body_uniq",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source_id}/{self.event_id}"

    @property
    def fingerprint(self) -> str:
        """The content's fingerprint as the inbox row and the evidence hold it: 64 hex
        characters, whichever form the key stores."""
        if self.content_digest is not None:
            return bytes(self.content_digest).hex()
        return self.content_fingerprint or ""


class InboxKeyPurge(models.Model):
    """One run of the ledger's purge that deleted keys (docs/subsystems/inbox.md, "The
    deduplication ledger"): how many went, received before when, in how many batches, and
    where in the ledger's ids the next run starts (``resume_from``). Keys below it are gone
    or were looked at already; starting there, a run never walks again the index entries of
    keys deleted before, which stay in the ledger's primary key until vacuum removes them.
    Not evidence: a key is not part of the audit trail."""

    purged_at = models.DateTimeField()
    received_before = models.DateTimeField()
    deleted = models.PositiveBigIntegerField()
    batches = models.PositiveIntegerField()
    from_key_id = models.BigIntegerField()
    resume_from = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.deleted} keys received before {self.received_before:%Y-%m-%d}"


class InboxAttempt(models.Model):
    """One processing attempt of an inbox event: written when the attempt starts (so that an
    attempt whose worker died stays visible), closed with its outcome when it ends. Rows are
    never deleted while their event exists."""

    class Outcome(models.TextChoices):
        STARTED = "started"
        SUCCEEDED = "succeeded"
        IGNORED = "ignored"
        RETRY = "retry"
        DEAD_LETTERED = "dead_lettered"

    # An id, not a foreign key constraint: an event and its attempts are stored, and leave,
    # together by the event's received time (``event_received_at``), which is what time
    # partitions of both tables need (docs/scaling.md, "Time partitions of the inbox").
    # No index of its own: ``webhooks_attempt_event_idx`` leads with it.
    event = models.ForeignKey(
        InboxEvent,
        on_delete=models.CASCADE,
        db_constraint=False,
        db_index=False,
        related_name="attempt_log",
    )
    # The event's ``received_at``, written with the attempt (the claim reads it with the
    # row). Attempts stored before it was kept hold 1970-01-01 (migration 0030).
    event_received_at = models.DateTimeField()
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=32, choices=Outcome.choices, default=Outcome.STARTED
    )
    resulting_status = models.CharField(max_length=32, blank=True, default="")
    error = models.TextField(blank=True, default="")
    worker = models.CharField(max_length=255, blank=True, default="")
    log_ticket = log_ticket_field()

    class Meta:
        indexes = [
            models.Index(fields=["event", "number"], name="webhooks_attempt_event_idx"),
            *log_ticket_indexes("webhooks_attempt"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number}"


class FingerprintMismatch(models.Model):
    """Evidence of an inconsistent duplicate: the same (source, event_id) delivered with other
    content. The original inbox row is never touched; this keeps the conflicting delivery:
    each distinct conflicting body once per event (its first delivery's headers, address and
    time), its repeats counted (``repeat_count``, ``last_seen_at``), so that retries of one
    conflicting delivery never store its body again. Only retention drops the body
    (``body_purged_at``), keeping the hashes.

    ``counts_repeats``: rows stored before repeats were counted each stand for one delivery
    (the column's database default, ``false``, is theirs); every row stored since counts its
    repeats and is unique per (event, body)."""

    # The conflicting delivery's key names the row (``InboxKey``): the evidence is kept
    # whether or not the row is still in the inbox, so nothing in the database ties them.
    event = models.ForeignKey(
        InboxEvent,
        on_delete=models.PROTECT,
        db_constraint=False,
        related_name="mismatches",
    )
    raw_body = models.BinaryField(null=True)
    body_purged_at = models.DateTimeField(null=True, blank=True)
    headers = models.JSONField(default=dict)
    original_fingerprint = models.CharField(max_length=64)
    conflicting_fingerprint = models.CharField(max_length=64)
    conflicting_payload_hash = models.CharField(max_length=64)
    remote_addr = models.GenericIPAddressField(null=True, blank=True)
    received_at = models.DateTimeField(default=timezone.now)
    repeat_count = models.PositiveIntegerField(
        default=1, db_default=1, help_text="Deliveries of this body for this event."
    )
    last_seen_at = models.DateTimeField(null=True, blank=True)
    counts_repeats = models.BooleanField(default=True, db_default=False)
    investigated_at = models.DateTimeField(null=True, blank=True)
    investigated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    investigation_note = models.TextField(blank=True, default="")
    log_ticket = log_ticket_field()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["event", "conflicting_payload_hash"],
                condition=Q(counts_repeats=True),
                name="webhooks_mismatch_event_body_uniq",
            ),
        ]
        indexes = [
            models.Index(
                fields=["-received_at"], name="webhooks_mismatch_received_idx"
            ),
            models.Index(
                fields=["investigated_at", "-received_at"],
                name="webhooks_mismatch_open_idx",
            ),
            *log_ticket_indexes("webhooks_mismatch"),
        ]
        verbose_name_plural = "fingerprint mismatches"
        permissions = [
            (
                "investigate_fingerprintmismatch",
                "Can mark fingerprint mismatches investigated",
            )
        ]

    def __str__(self) -> str:
        received = f"{self.received_at:%Y-%m-%d %H:%M:%S}"
        return f"conflicting delivery of {self.event.event_id} at {received}"


class SignatureFailure(models.Model):
    """Failed authentication, counted per (source, reason, minute): the bounded write an
    unauthenticated request may cost. Never the body, never the signature."""

    # No index of its own: ``webhooks_sigfail_window_uniq`` leads with it.
    source = models.ForeignKey(
        WebhookSource,
        on_delete=models.CASCADE,
        related_name="signature_failures",
        db_index=False,
    )
    reason = models.CharField(max_length=32)
    window_start = models.DateTimeField()
    count = models.PositiveIntegerField(default=0)
    last_remote_addr = models.GenericIPAddressField(null=True, blank=True)
    last_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "reason", "window_start"],
                name="webhooks_sigfail_window_uniq",
            ),
        ]
        indexes = [
            models.Index(fields=["-window_start"], name="webhooks_sigfail_window_idx")
        ]

    def __str__(self) -> str:
        return f"{self.reason} x{self.count} at {self.window_start:%Y-%m-%d %H:%M}"


# A bulk replay job's rate, in events per second: below the minimum a job would wait minutes
# between events; above the maximum no worker keeps up and the pace means nothing.
BULK_REPLAY_RATE_MIN = 0.01
BULK_REPLAY_RATE_MAX = 10_000.0


class BulkReplayJob(models.Model):
    """Replay of every inbox row matching a filter, run by workers as a chain of tasks, each a
    bounded slice of chunks (``webhooks.bulk_replay.bulk_replay_job_run``). ``run`` counts starts
    and resumes: a task of an earlier run does nothing; ``task_seq`` is the task of the run
    the job waits for, so that a message delivered twice runs once. ``last_event_pk`` is how
    far the job got: a resumed job goes on from there, so a row it replayed is not replayed
    again even if it failed again since. ``lease_expires_at`` is renewed by every chunk: a
    queued or running job whose lease ran out was interrupted, and may be resumed, as may a
    cancelled one.

    A document's events go back one at a time: a row whose entity has an earlier event not
    finished yet (one the job replayed, still on its way) waits in ``waiting_event_pks``.

    With a ``rate`` the job replays at most that many events per second: slices of chunks on
    the schedule of ``webhooks.pacing``, ``next_chunk_at`` the next slice's due time. Progress
    and the measured rate are written with each chunk, never per event: ``rate_since`` and
    ``rate_base`` are the time and count at the end of the run's first chunk,
    ``last_chunk_at`` the end of its latest."""

    class State(models.TextChoices):
        COUNTED = "counted", "Dry run counted, waiting to start"
        QUEUED = "queued"
        RUNNING = "running"
        PAUSED = "paused"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    source = models.ForeignKey(
        WebhookSource,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Empty: every source.",
    )
    status = models.CharField(
        max_length=32,
        choices=[(s.value, s.label) for s in REPLAYABLE_STATUSES],
        default=ProcessingStatus.DEAD_LETTERED,
    )
    since = models.DateTimeField(
        null=True, blank=True, help_text="Only rows received at or after this time."
    )
    until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Only rows received before this time (the operator API freezes its "
        "jobs' window when they are created).",
    )
    event_ids = models.JSONField(
        default=list, blank=True, help_text="Only these event ids (producer ids)."
    )
    reason = models.TextField()
    state = models.CharField(
        max_length=16, choices=State.choices, default=State.COUNTED
    )
    dry_run_count = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    created_by_name = models.CharField(
        "created by", max_length=255, blank=True, default=""
    )
    # Who started it, and who resumed it last: the operator actions of its chunks name the one
    # whose run replayed them.
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    started_by_name = models.CharField(
        "started by", max_length=255, blank=True, default=""
    )
    resumed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    resumed_by_name = models.CharField(
        "resumed by", max_length=255, blank=True, default=""
    )
    run = models.PositiveIntegerField(default=0)
    last_event_pk = models.BigIntegerField(
        default=0, help_text="The highest inbox row id this job has gone past."
    )
    # Rows the job went past that wait for an earlier event of their entity to finish
    # (``webhooks.bulk_replay``, "one document's events in order"): at most one chunk of them.
    waiting_event_pks = models.JSONField(
        default=list,
        blank=True,
        help_text="Inbox row ids the job went past that wait for an earlier event of "
        "their document to finish.",
    )
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    task_seq = models.PositiveIntegerField(default=0)
    rate = models.FloatField(
        "rate (events/s)",
        null=True,
        blank=True,
        validators=[
            MinValueValidator(BULK_REPLAY_RATE_MIN),
            MaxValueValidator(BULK_REPLAY_RATE_MAX),
        ],
        help_text=(
            "Optional: replay at most this many events per second "
            f"({BULK_REPLAY_RATE_MIN:g} to {BULK_REPLAY_RATE_MAX:g}). "
            "Empty: as fast as the workers go."
        ),
    )
    next_chunk_at = models.DateTimeField(null=True, blank=True)
    rate_since = models.DateTimeField(null=True, blank=True)
    rate_base = models.PositiveIntegerField(default=0)
    last_chunk_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(rate__isnull=True)
                | Q(rate__gte=BULK_REPLAY_RATE_MIN, rate__lte=BULK_REPLAY_RATE_MAX),
                name="webhooks_bulkjob_rate_range",
            ),
        ]
        indexes = [
            models.Index(fields=["-created_at"], name="webhooks_bulkjob_created_idx")
        ]

    def __str__(self) -> str:
        return f"bulk replay #{self.pk} ({self.state})"

    def rate_measured(self) -> float | None:
        """Events per second this run has replayed so far (``webhooks.pacing``)."""
        return measured_rate(
            processed=self.processed,
            base=self.rate_base,
            since=self.rate_since,
            last=self.last_chunk_at,
        )

    def finish_estimated(self, *, now: datetime | None = None) -> datetime | None:
        """When a queued or running job should have replayed its last row; ``None`` for a
        job that is not running or whose pace is not known yet."""
        if self.state not in (self.State.QUEUED, self.State.RUNNING):
            return None
        pace = None
        if self.rate is not None:
            pace = pace_for(rate=self.rate, tick=settings.BULK_REPLAY_RATE_TICK_SECONDS)
        return finish_estimate(
            now=now or timezone.now(),
            remaining=max((self.total or self.dry_run_count) - self.processed, 0),
            pace=pace,
            next_due=self.next_chunk_at,
            measured=self.rate_measured(),
        )


class DeadLetteredEvent(InboxEvent):
    """The dead-letter queue: inbox rows in ``dead_lettered``, as their own admin list."""

    class Meta:
        proxy = True
        verbose_name = "dead-lettered event"
        verbose_name_plural = "dead-letter queue"
