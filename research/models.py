from django.db import models
from django.db.models import Q

from core.models import log_ticket_field, log_ticket_indexes


class ResearchDocument(models.Model):
    """The current state of one research document, as applied from its events.

    ``current_source_version``, ``last_occurred_at`` and ``last_event_id`` describe the event whose
    state the row holds: the research handler compares every incoming event with them, under this
    row's lock, so the state never moves backwards. A delete leaves a tombstone
    (``is_deleted``) that keeps its version."""

    entity_id = models.CharField(max_length=128)
    entity_type = models.CharField(max_length=128, blank=True, default="")
    current_source_version = models.BigIntegerField(null=True, blank=True)
    last_occurred_at = models.DateTimeField(null=True, blank=True)
    last_event_id = models.CharField(max_length=128, blank=True, default="")
    source_url = models.TextField(blank=True, default="")
    title = models.TextField(blank=True, default="")
    source_content_hash = models.CharField(max_length=255, blank=True, default="")
    published_at = models.DateTimeField(null=True, blank=True)
    summary = models.TextField(blank=True, default="")
    authors = models.JSONField(default=list, blank=True)
    is_deleted = models.BooleanField(default=False)
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # A Meta constraint, not unique=True: no extra pattern-ops index to write.
            models.UniqueConstraint(
                fields=["entity_id"], name="research_document_entity_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["updated_at"], name="research_document_updated_idx"),
            models.Index(
                fields=["-id"],
                name="research_document_deleted_idx",
                condition=Q(is_deleted=True),
            ),
        ]

    def __str__(self) -> str:
        return self.entity_id


class Citation(models.Model):
    """One citation of a document's current state, in the producer's order."""

    # No index of its own: ``research_citation_position_uniq`` leads with it.
    document = models.ForeignKey(
        ResearchDocument,
        on_delete=models.CASCADE,
        related_name="citations",
        db_index=False,
    )
    position = models.PositiveIntegerField()
    text = models.TextField()
    reference_url = models.TextField()

    class Meta:
        ordering = ["document", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["document", "position"], name="research_citation_position_uniq"
            ),
        ]

    def __str__(self) -> str:
        return self.reference_url


class DocumentRevision(models.Model):
    """One applied event (append-only): what changed a document, from which inbox event, with
    the snapshot of the state it applied. An applied delete writes one too."""

    class Kind(models.TextChoices):
        CREATED = "created"
        UPDATED = "updated"
        DELETED = "deleted"

    # No index of its own: ``research_revision_doc_idx`` leads with it.
    document = models.ForeignKey(
        ResearchDocument,
        on_delete=models.PROTECT,
        related_name="revisions",
        db_index=False,
    )
    # The event applied, by id: no foreign key constraint into the inbox, whose rows leave
    # with retention while the revision stays (docs/scaling.md, "Time partitions of the
    # inbox"). Its index is the unique constraint on it (``research_revision_event_uniq``).
    inbox_event = models.ForeignKey(
        "webhooks.InboxEvent",
        on_delete=models.PROTECT,
        db_constraint=False,
        db_index=False,
        related_name="revisions",
    )
    event_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    source_version = models.BigIntegerField(null=True, blank=True)
    occurred_at = models.DateTimeField(null=True, blank=True)
    content_hash = models.CharField(max_length=255, blank=True, default="")
    snapshot = models.JSONField(default=dict)
    applied_at = models.DateTimeField()
    log_ticket = log_ticket_field()

    class Meta:
        constraints = [
            # The database's last word on "no event is applied twice".
            models.UniqueConstraint(
                fields=["inbox_event"], name="research_revision_event_uniq"
            ),
        ]
        indexes = [
            models.Index(fields=["document", "id"], name="research_revision_doc_idx"),
            models.Index(fields=["-applied_at"], name="research_revision_applied_idx"),
            *log_ticket_indexes("research_revision"),
        ]

    def __str__(self) -> str:
        """The document and the version this revision made it: ``doc42 v5 (updated)``."""
        version = (
            "(no version)" if self.source_version is None else f"v{self.source_version}"
        )
        return f"{self.document.entity_id} {version} ({self.kind})"
