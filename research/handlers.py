"""The research handler: ``research.document.created|updated|deleted`` (SPEC section 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from webhooks.handlers import HandlerResult
from webhooks.models import ProcessingStatus

from .services import (
    DOCUMENT_EVENT_KINDS,
    Decision,
    document_change_apply,
    document_change_parse,
)

if TYPE_CHECKING:
    from webhooks.models import InboxEvent

_STATUS_BY_DECISION = {
    Decision.APPLY: ProcessingStatus.PROCESSED,
    Decision.DUPLICATE_VERSION: ProcessingStatus.IGNORED_DUPLICATE_VERSION,
    Decision.OUT_OF_ORDER: ProcessingStatus.IGNORED_OUT_OF_ORDER,
}


def research_event_handle(event: InboxEvent) -> HandlerResult:
    """Validates the event's data (invalid: ``PermanentProcessingError``) and applies it to its
    document under the document's row lock, by the ordering rule; other event types are
    ``ignored_unsupported``."""
    kind = DOCUMENT_EVENT_KINDS.get(event.event_type)
    if kind is None:
        return HandlerResult(
            status=ProcessingStatus.IGNORED_UNSUPPORTED,
            note=f"unsupported event type {event.event_type[:128]!r}",
        )
    change = document_change_parse(event=event, kind=kind)
    decision, document, revision = document_change_apply(event=event, change=change)
    details = {"entity_id": change.entity_id}
    if revision is not None:
        details["revision_id"] = revision.pk
        return HandlerResult(status=ProcessingStatus.PROCESSED, details=details)
    return HandlerResult(
        status=_STATUS_BY_DECISION[decision],
        note=_ignored_note(change=change, document=document),
        details=details,
    )


def _ignored_note(*, change, document) -> str:
    """Why an event was not applied, for the operator reading the inbox row."""
    if (
        change.source_version is not None
        and document.current_source_version is not None
    ):
        return (
            f"source_version {change.source_version} is not newer than the document's "
            f"current version {document.current_source_version}"
        )
    return (
        f"(occurred_at, event_id) is not later than the applied event "
        f"{document.last_event_id!r}"
    )
