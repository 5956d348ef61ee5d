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
    # No index of its own: ``audit_sealentry_seal_idx`` leads with it.
    seal = models.ForeignKey(
        AuditSeal, on_delete=models.PROTECT, related_name="entries", db_index=False
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
    # No index of its own: ``audit_sealaction_seal_idx`` leads with it.
    seal = models.ForeignKey(
        AuditSeal,
        on_delete=models.PROTECT,
        related_name="action_entries",
        db_index=False,
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


# --- The verifiable log (docs/security.md, "Verifiable log") ----------------------------------


class LogLeaf(AppendOnlyModel):
    """One entry of the log: the canonical JSON of a record's immutable fields with its kind
    and id (``audit.leaves``), at position ``index`` of the Merkle tree. Leaves are written by
    ``audit.log.log_append`` only, with the nodes they complete, in one transaction.

    ``record_id`` is a plain integer, not a foreign key: the entry outlives the record, so
    that a deleted record is named by verification. A record enters the log once."""

    index = models.BigIntegerField(primary_key=True)
    kind = models.CharField(max_length=40)
    record_id = models.BigIntegerField()
    leaf = models.TextField(help_text="The canonical JSON the tree hashes (UTF-8).")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "record_id"], name="audit_logleaf_record_uniq"
            ),
            models.CheckConstraint(
                condition=models.Q(index__gte=0), name="audit_logleaf_index_nonneg"
            ),
        ]

    def __str__(self) -> str:
        return f"log entry {self.index} ({self.kind} {self.record_id})"


class LogNode(AppendOnlyModel):
    """The hash of one complete subtree of the log (a leaf's hash at level 0), stored once
    made. ``position`` is ``audit.merkle.stored_hash_index(level, index)``: a batch appends one
    contiguous run of positions, and any root or proof is assembled from O(log n) rows read
    by primary key."""

    position = models.BigIntegerField(primary_key=True)
    hash = models.BinaryField(max_length=32)

    def __str__(self) -> str:
        return f"log node {self.position}"


class LogCheckpoint(AppendOnlyModel):
    """A signed checkpoint of the log (C2SP tlog-checkpoint as a signed note), made by a
    sealing round that grew the tree. ``note`` is exactly what ``GET /audit/checkpoint``
    serves."""

    tree_size = models.BigIntegerField()
    root_hash = models.BinaryField(max_length=32)
    note = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tree_size"], name="audit_logcheckpoint_size_uniq"
            ),
            models.CheckConstraint(
                condition=models.Q(tree_size__gte=0),
                name="audit_logcheckpoint_size_nonneg",
            ),
        ]

    def __str__(self) -> str:
        return f"checkpoint at size {self.tree_size}"


class LogCheckpointDelivery(AppendOnlyModel):
    """A checkpoint that the witness (``AUDIT_WITNESS_URL``) accepted: the next round sends
    the latest checkpoint again until one is recorded here."""

    # No index of its own: ``audit_checkpointdelivery_uniq`` leads with it.
    checkpoint = models.ForeignKey(
        LogCheckpoint,
        on_delete=models.PROTECT,
        related_name="deliveries",
        db_index=False,
    )
    target = models.TextField(
        help_text="The witness's URL without user info or query (a fingerprint of the "
        "query in its place): audit.checkpoints.witness_target."
    )
    delivered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["checkpoint", "target"], name="audit_checkpointdelivery_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.checkpoint} delivered to {self.target}"


class LogCursor(models.Model):
    """How far the sealer has gone through one ledger (``audit.sealer``): mutable state, not a
    ledger. Rows of the kind sort by ``(log_ticket, id)``; every row at or before
    ``(ticket, ticket_id)`` is logged, or listed in ``pending`` (old enough but not ready yet:
    an attempt still open). Rows without a ticket (SQLite; on PostgreSQL, rows written before
    the column existed) sort by id, and every one at or before ``null_id`` is logged or
    pending.

    Nothing here is trusted by verification, which compares the whole log with the whole of
    every ledger: a cursor moved behind the product's back makes the sealer skip rows, and
    ``audit_verify`` names each of them."""

    kind = models.CharField(max_length=40, primary_key=True)
    ticket = models.BigIntegerField(default=0)
    ticket_id = models.BigIntegerField(default=0)
    null_id = models.BigIntegerField(default=0)
    pending = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"log cursor of {self.kind}"


# --- The dashboard's figures, counted ahead (docs/scaling.md, "The dashboard at scale") -----


class LatencyFigure(models.TextChoices):
    # Received -> processed, less the time a pause held the event.
    PROCESSING = "processing", "processing time"
    HELD = "held", "time held by a pause"
    # Occurred (the producer's clock) -> received.
    PRODUCER_DELAY = "producer_delay", "producer delay"


class InboxHourlyFigures(models.Model):
    """The inbox's events received in one UTC hour with one processing status, as they stood
    when the figures were last counted (``audit.figures.inbox_figures_count``): mutable
    state, not a ledger. The table holds the last count's hours only."""

    hour = models.DateTimeField()
    processing_status = models.CharField(max_length=32)
    events = models.PositiveBigIntegerField()
    deliveries = models.PositiveBigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "processing_status"], name="audit_hourly_status_uniq"
            )
        ]
        verbose_name_plural = "inbox hourly figures"

    def __str__(self) -> str:
        return f"{self.events} {self.processing_status} received at {self.hour:%H}h"


class InboxHourlyLatency(models.Model):
    """One bucket of a latency's histogram over the events received in one UTC hour: how
    many of them fell in it, the least and the greatest (``audit.figures``, whose buckets
    each span 1% of their values). Mutable state, as ``InboxHourlyFigures``."""

    hour = models.DateTimeField()
    figure = models.CharField(max_length=16, choices=LatencyFigure.choices)
    bucket = models.IntegerField()
    count = models.PositiveBigIntegerField()
    low = models.FloatField()
    high = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "figure", "bucket"], name="audit_hourly_latency_uniq"
            )
        ]
        verbose_name_plural = "inbox hourly latencies"

    def __str__(self) -> str:
        return f"{self.count} {self.figure} in bucket {self.bucket} at {self.hour:%H}h"


class InboxFiguresCounted(models.Model):
    """How far the hourly figures go: one row, written by each count with its figures, read
    by the dashboard with them. The figures hold the events received from ``counted_from``
    (the start of an hour) to before ``counted_to``, as they stood at ``counted_at``. None:
    never counted."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    counted_from = models.DateTimeField(null=True)
    counted_to = models.DateTimeField(null=True)
    counted_at = models.DateTimeField(null=True)
    seconds = models.FloatField(default=0, help_text="How long the last count took.")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(id=1), name="audit_figures_counted_one_row"
            )
        ]
        verbose_name_plural = "inbox figures counted"

    def __str__(self) -> str:
        return f"inbox figures counted to {self.counted_to}"
