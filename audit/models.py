from django.conf import settings
from django.db import models
from django.db.models import Q

from webhooks.models import InboxEvent, ProcessingStatus, WebhookSource


class AppendOnlyError(Exception):
    """A ledger row was about to be changed or deleted."""


class AppendOnlyModel(models.Model):
    """Ledger rows are written once. ``save`` on an existing row and ``delete`` refuse."""

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only")


class OperatorAction(AppendOnlyModel):
    """Who did what to which inbox events, when and why. Append-only; auditors browse it."""

    class Action(models.TextChoices):
        REPLAY = "replay"
        BULK_REPLAY = "bulk_replay"
        MARK_INVESTIGATED = "mark_investigated"
        ROTATE_SECRET = "rotate_secret"  # noqa: S105 - an action name

    action = models.CharField(max_length=32, choices=Action.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    # The admin user's username, or "os:<login>" for a command run from a shell: kept as text so
    # the record reads the same after the user is renamed.
    actor_name = models.CharField(max_length=255)
    reason = models.TextField(blank=True, default="")
    event_ids = models.JSONField(default=list, help_text="Inbox event primary keys.")
    event_count = models.PositiveIntegerField(default=0)
    skipped_count = models.PositiveIntegerField(
        default=0, help_text="Selected rows that were not in a replayable status."
    )
    details = models.JSONField(default=dict, blank=True)
    bulk_job = models.ForeignKey(
        "BulkReplayJob",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="actions",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["-created_at"], name="audit_action_created_idx"),
            models.Index(
                fields=["action", "-created_at"], name="audit_action_kind_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_name} ({self.event_count} events)"


class BulkReplayJob(models.Model):
    """Replay of every inbox row matching a filter, run by a worker in chunks."""

    class State(models.TextChoices):
        COUNTED = "counted", "Dry run counted, waiting to start"
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    REPLAYABLE_STATUSES = (ProcessingStatus.DEAD_LETTERED, ProcessingStatus.FAILED)

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
    created_by_name = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["-created_at"], name="audit_bulkjob_created_idx")
        ]

    def __str__(self) -> str:
        return f"bulk replay #{self.pk} ({self.state})"


class AuditSeal(AppendOnlyModel):
    """One link of the hash chain over the inbox: ``seal_hash = sha256(previous seal_hash,
    rows_hash, sequence, row_count)``; ``rows_hash`` covers the row digests of its entries in id
    order (each digest: id, payload hash, received time)."""

    sequence = models.PositiveBigIntegerField()
    previous_hash = models.CharField(max_length=64)
    rows_hash = models.CharField(max_length=64)
    seal_hash = models.CharField(max_length=64)
    row_count = models.PositiveIntegerField()
    first_event_id = models.BigIntegerField()
    last_event_id = models.BigIntegerField()
    horizon = models.DateTimeField(
        help_text="Only rows received before this time were eligible."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["sequence"], name="audit_seal_sequence_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"seal #{self.sequence}"


class AuditSealEntry(AppendOnlyModel):
    """A sealed inbox row: which seal holds it and the digest it had then. Tracking sealed rows
    explicitly (rather than a "last sealed id") is what lets a row whose transaction committed
    after a higher id was sealed still be sealed by a later run.

    ``inbox_event_id`` is a plain integer, not a foreign key: the entry must outlive the row so
    that a deleted row is named by ``audit_verify``."""

    inbox_event_id = models.BigIntegerField()
    seal = models.ForeignKey(
        AuditSeal, on_delete=models.PROTECT, related_name="entries"
    )
    row_digest = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["inbox_event_id"], name="audit_sealentry_event_uniq"
            )
        ]
        indexes = [
            models.Index(
                fields=["seal", "inbox_event_id"], name="audit_sealentry_seal_idx"
            )
        ]

    def __str__(self) -> str:
        return f"event {self.inbox_event_id} in seal {self.seal_id}"


class DeadLetteredEvent(InboxEvent):
    """The dead-letter queue: inbox rows in ``dead_lettered``, as their own admin list."""

    class Meta:
        proxy = True
        verbose_name = "dead-lettered event"
        verbose_name_plural = "dead-letter queue"


DEAD_LETTER_FILTER = Q(processing_status=ProcessingStatus.DEAD_LETTERED)
