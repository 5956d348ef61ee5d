from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.models import ApiClient


class IdempotencyStatus(models.TextChoices):
    PROCESSING = "processing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class IdempotencyRecord(models.Model):
    """The outcome of one (client, operation_type, key): the fingerprint that defines the
    operation, the resource it created and the exact response to replay.

    Only one live (not expired) record may exist per (client, operation_type, key): the partial
    unique constraint decides concurrent first requests. Expired records stay for audit until
    the retention purge."""

    # No index of its own: the lookups below lead with it, and a bare client index would
    # tempt the planner into scanning all of one client's records for a key.
    client = models.ForeignKey(
        ApiClient, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    operation_type = models.CharField(max_length=64)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    # The canonical values the fingerprint was computed from: names what differs on a 409.
    fingerprint_fields = models.JSONField(default=dict)
    resource_id = models.CharField(max_length=64, blank=True, default="")
    status = models.CharField(
        max_length=16,
        choices=IdempotencyStatus.choices,
        default=IdempotencyStatus.PROCESSING,
    )
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.BinaryField(null=True, blank=True)
    response_location = models.CharField(max_length=255, blank=True, default="")
    # SHA-256 of the first request's body as sent: a retry with the very same bytes is
    # answered from the record without parsing or validating its body again.
    request_hash = models.CharField(max_length=64, blank=True, default="")
    expires_at = models.DateTimeField()
    expired_at = models.DateTimeField(null=True, blank=True)
    # While ``processing``: when the operation must next show progress, kept by the app that
    # owns the resource (a queued job must be picked up, a running one reported on, by then).
    # Past it the key is stuck. None once the operation is resolved.
    progress_deadline = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # What the key met after its first request, for the console: retries answered with the
    # stored response, and requests refused 409 for another body (one UPDATE on those paths
    # only; the database's defaults, so that the record's INSERT need not name them).
    replay_count = models.PositiveIntegerField(default=0, db_default=0)
    last_replayed_at = models.DateTimeField(null=True, blank=True)
    conflict_count = models.PositiveIntegerField(default=0, db_default=0)
    last_conflict_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["client", "operation_type", "key"],
                condition=Q(expired_at__isnull=True),
                name="idempotency_live_key_uniq",
            ),
        ]
        indexes = [
            # Expired records of a key, for the key lookup API; live ones stay out of it.
            models.Index(
                fields=["client", "operation_type", "key"],
                name="idempotency_oldkey_idx",
                condition=Q(expired_at__isnull=False),
            ),
            models.Index(
                fields=["operation_type", "resource_id"],
                name="idempotency_resource_idx",
            ),
            # Cleanup: live records past their expiry, and expired ones past retention.
            models.Index(
                fields=["expires_at"],
                name="idempotency_expiry_idx",
                condition=Q(expired_at__isnull=True),
            ),
            models.Index(
                fields=["expired_at"],
                name="idempotency_expired_idx",
                condition=Q(expired_at__isnull=False),
            ),
            models.Index(
                fields=["status", "-created_at"], name="idempotency_status_idx"
            ),
            # Stuck keys (the gauge, the dashboard, the admin): processing past the deadline.
            models.Index(
                fields=["progress_deadline"],
                name="idempotency_stuck_idx",
                condition=Q(status="processing"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.operation_type}:{self.key}"

    @property
    def is_expired(self) -> bool:
        return self.expired_at is not None or self.expires_at <= timezone.now()
