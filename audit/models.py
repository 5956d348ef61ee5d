from django.db import models

from core.models import AppendOnlyModel


class AuditSeal(AppendOnlyModel):
    """One link of the hash chain over the inbox and the operator actions: ``seal_hash`` is an
    HMAC-SHA256 under ``AUDIT_SEAL_KEY`` of the previous seal's hash and of every other field
    (``audit.chain.seal_mac``); ``rows_hash`` and ``actions_hash`` cover the digests of its
    entries in id order. ``version`` says what a row digest covers (``audit.chain``): seals
    made before version 2 hold inbox rows only, digested over id, payload hash and received
    time."""

    version = models.PositiveSmallIntegerField()
    sequence = models.PositiveBigIntegerField()
    previous_hash = models.CharField(max_length=64)
    rows_hash = models.CharField(max_length=64)
    seal_hash = models.CharField(max_length=64)
    row_count = models.PositiveIntegerField()
    first_event_id = models.BigIntegerField(null=True, blank=True)
    last_event_id = models.BigIntegerField(null=True, blank=True)
    actions_hash = models.CharField(max_length=64, blank=True, default="")
    action_count = models.PositiveIntegerField(default=0)
    first_action_id = models.BigIntegerField(null=True, blank=True)
    last_action_id = models.BigIntegerField(null=True, blank=True)
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


class AuditSealActionEntry(AppendOnlyModel):
    """A sealed operator action, as ``AuditSealEntry`` is a sealed inbox row: a plain integer,
    so that a deleted action is named by ``audit_verify``."""

    operator_action_id = models.BigIntegerField()
    seal = models.ForeignKey(
        AuditSeal, on_delete=models.PROTECT, related_name="action_entries"
    )
    row_digest = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["operator_action_id"], name="audit_sealaction_action_uniq"
            )
        ]
        indexes = [
            models.Index(
                fields=["seal", "operator_action_id"], name="audit_sealaction_seal_idx"
            )
        ]

    def __str__(self) -> str:
        return f"operator action {self.operator_action_id} in seal {self.seal_id}"
