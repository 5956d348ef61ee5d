from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class SignatureScheme(models.TextChoices):
    HMAC_SHA256 = "hmac-sha256", "HMAC-SHA256 (timestamp.body)"
    STANDARD_WEBHOOKS = "standard-webhooks", "Standard Webhooks"
    GITHUB = "github", "GitHub (X-Hub-Signature-256)"


class HandlerName(models.TextChoices):
    RESEARCH = "research", "Research documents"
    GITHUB = "github", "GitHub events"


class WebhookSource(models.Model):
    """A producer that POSTs to /webhooks/<slug>/, with its scheme, handler and secrets."""

    slug = models.SlugField(max_length=64)
    scheme = models.CharField(
        max_length=32,
        choices=SignatureScheme.choices,
        default=SignatureScheme.HMAC_SHA256,
    )
    handler = models.CharField(max_length=32, choices=HandlerName.choices)
    timestamp_tolerance_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Overrides WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS.",
    )
    is_enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["slug"], name="webhooks_source_slug_uniq"),
        ]
        permissions = [("rotate_secret", "Can rotate webhook source secrets")]

    def __str__(self) -> str:
        return self.slug


class WebhookSecret(models.Model):
    """One signing secret of a source. Several are valid at once during a rotation: the old one
    until ``expires_at``, the new one with no expiry. Never displayed after creation."""

    source = models.ForeignKey(
        WebhookSource, on_delete=models.CASCADE, related_name="secrets"
    )
    secret = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["source", "expires_at"], name="webhooks_secret_valid_idx"
            )
        ]

    def __str__(self) -> str:
        return f"secret #{self.pk} of {self.source_id}"

    def __repr__(self) -> str:
        return f"<WebhookSecret {self.pk} source={self.source_id}>"


class ProcessingStatus(models.TextChoices):
    RECEIVED = "received"
    PROCESSING = "processing"
    PROCESSED = "processed"
    IGNORED_OUT_OF_ORDER = "ignored_out_of_order"
    IGNORED_DUPLICATE_VERSION = "ignored_duplicate_version"
    IGNORED_UNSUPPORTED = "ignored_unsupported"
    FAILED = "failed"
    DEAD_LETTERED = "dead_lettered"


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

    source = models.ForeignKey(
        WebhookSource, on_delete=models.PROTECT, related_name="events"
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
    raw_body = models.BinaryField(null=True)
    body_purged_at = models.DateTimeField(null=True, blank=True)
    headers = models.JSONField(default=dict)
    signature_valid = models.BooleanField(default=True)
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
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    delivery_count = models.PositiveIntegerField(default=1)
    last_seen_at = models.DateTimeField(default=timezone.now)
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "event_id"], name="webhooks_inbox_source_event_uniq"
            ),
        ]
        indexes = [
            # The sweep: rows waiting for (re)dispatch, by status and due time.
            models.Index(
                fields=["processing_status", "next_attempt_at"],
                name="webhooks_inbox_sweep_idx",
                condition=Q(processing_status__in=["received", "processing", "failed"]),
            ),
            models.Index(fields=["-received_at"], name="webhooks_inbox_received_idx"),
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
            models.Index(fields=["entity_id"], name="webhooks_inbox_entity_idx"),
            models.Index(fields=["event_id"], name="webhooks_inbox_event_id_idx"),
        ]
        permissions = [("replay_inboxevent", "Can replay dead-lettered inbox events")]

    def __str__(self) -> str:
        return f"{self.source_id}:{self.event_id}"

    @property
    def is_terminal(self) -> bool:
        return self.processing_status in TERMINAL_STATUSES


class InboxAttempt(models.Model):
    """One processing attempt of an inbox event (append-only)."""

    class Outcome(models.TextChoices):
        STARTED = "started"
        SUCCEEDED = "succeeded"
        IGNORED = "ignored"
        RETRY = "retry"
        DEAD_LETTERED = "dead_lettered"

    event = models.ForeignKey(
        InboxEvent, on_delete=models.CASCADE, related_name="attempt_log"
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=32, choices=Outcome.choices, default=Outcome.STARTED
    )
    resulting_status = models.CharField(max_length=32, blank=True, default="")
    error = models.TextField(blank=True, default="")
    worker = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["event", "number"], name="webhooks_attempt_event_idx")
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.event_id}"


class FingerprintMismatch(models.Model):
    """Evidence of an inconsistent duplicate: the same (source, event_id) delivered with other
    content. The original inbox row is never touched; this keeps the conflicting delivery."""

    event = models.ForeignKey(
        InboxEvent, on_delete=models.PROTECT, related_name="mismatches"
    )
    raw_body = models.BinaryField()
    headers = models.JSONField(default=dict)
    original_fingerprint = models.CharField(max_length=64)
    conflicting_fingerprint = models.CharField(max_length=64)
    conflicting_payload_hash = models.CharField(max_length=64)
    remote_addr = models.GenericIPAddressField(null=True, blank=True)
    received_at = models.DateTimeField(default=timezone.now)
    investigated_at = models.DateTimeField(null=True, blank=True)
    investigated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    investigation_note = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(
                fields=["-received_at"], name="webhooks_mismatch_received_idx"
            ),
            models.Index(
                fields=["investigated_at", "-received_at"],
                name="webhooks_mismatch_open_idx",
            ),
        ]
        permissions = [
            (
                "investigate_fingerprintmismatch",
                "Can mark fingerprint mismatches investigated",
            )
        ]

    def __str__(self) -> str:
        return f"mismatch #{self.pk} on {self.event_id}"


class SignatureFailure(models.Model):
    """Failed authentication, counted per (source, reason, minute): the bounded write an
    unauthenticated request may cost. Never the body, never the signature."""

    source = models.ForeignKey(
        WebhookSource, on_delete=models.CASCADE, related_name="signature_failures"
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
        return f"{self.source_id} {self.reason} x{self.count}"
