"""Reads."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Prefetch, QuerySet

from core.errors import NotFound

from .models import Citation, DocumentRevision, ResearchDocument


def research_document_list(
    *, is_deleted: bool | None = None, updated_since: datetime | None = None
) -> QuerySet[ResearchDocument]:
    """Documents with applied state (rows only created to be locked never show), citations
    prefetched in their order."""
    documents = ResearchDocument.objects.exclude(last_event_id="").prefetch_related(
        Prefetch("citations", queryset=Citation.objects.order_by("position"))
    )
    if is_deleted is not None:
        documents = documents.filter(is_deleted=is_deleted)
    if updated_since is not None:
        documents = documents.filter(updated_at__gte=updated_since)
    return documents


def research_document_get(*, entity_id: str) -> ResearchDocument:
    document = research_document_list().filter(entity_id=entity_id).first()
    if document is None:
        raise NotFound()
    return document


def document_revision_list(*, entity_id: str) -> QuerySet[DocumentRevision]:
    """A document's revisions, oldest first; ``NotFound`` for an unknown document."""
    document = research_document_get(entity_id=entity_id)
    return DocumentRevision.objects.filter(document=document)
