from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from django.utils import timezone

from core.errors import InvalidPayload, PermanentProcessingError
from research.models import DocumentRevision
from research.services import (
    Decision,
    DocumentChange,
    LockedDocument,
    document_change_apply,
    document_changes_apply,
    document_data_validate,
)
from webhooks.envelopes import Envelope, content_fingerprint
from webhooks.integrations import HandlerResult, SampleEvent
from webhooks.models import ProcessingStatus

from .events import (
    RESEARCH_EVENT_COMPONENTS,
    RESEARCH_EVENT_SCHEMA,
    ResearchEvent,
    research_event_parse,
)

if TYPE_CHECKING:
    from webhooks.models import InboxEvent
    from webhooks.schemes import Verified

DOCUMENT_EVENT_KINDS = {
    "research.document.created": DocumentRevision.Kind.CREATED,
    "research.document.updated": DocumentRevision.Kind.UPDATED,
    "research.document.deleted": DocumentRevision.Kind.DELETED,
}
_STATUS_BY_DECISION = {
    Decision.APPLY: ProcessingStatus.PROCESSED,
    Decision.DUPLICATE_VERSION: ProcessingStatus.IGNORED_DUPLICATE_VERSION,
    Decision.OUT_OF_ORDER: ProcessingStatus.IGNORED_OUT_OF_ORDER,
}


class ResearchIntegration:
    name = "research"
    label = "Research documents"
    headers: dict[str, str] = {}  # everything is in the signed body
    envelope_schema = RESEARCH_EVENT_SCHEMA
    envelope_components = RESEARCH_EVENT_COMPONENTS

    def envelope(
        self,
        *,
        body: dict,
        raw_body: bytes,
        headers: Mapping[str, str],
        verified: Verified,
    ) -> Envelope:
        """The research envelope; the id header must name the body's ``event_id``."""
        try:
            event = research_event_parse(body)
        except InvalidPayload as exc:
            errors = exc.details
        else:
            errors = {}
        event_id = body.get("event_id")
        if not verified.event_id:
            errors["event_id_header"] = ["The event id header is required."]
        elif isinstance(event_id, str) and verified.event_id != event_id:
            errors["event_id_header"] = ["Differs from the body's event_id."]
        if errors:
            raise InvalidPayload(details=errors)
        return Envelope(
            event_id=event.event_id,
            event_type=event.event_type,
            content_fingerprint=content_fingerprint(body),
            entity_id=event.entity_id,
            entity_type=event.entity_type,
            source_version=event.source_version,
            occurred_at=event.occurred_at,
            tenant_id=event.tenant_id,
            idempotency_key=event.idempotency_key,
            # The id is the signed body's event_id, and the id header must name it.
            event_id_signed=True,
        )

    def handle(self, event: InboxEvent) -> HandlerResult:
        """One event on its own (the embedded SQLite default, or after its set rolled
        back): ``handle_batch``'s rules with the change applied through the ORM
        (``document_change_apply``); a rejected event raises its
        ``PermanentProcessingError``."""
        [result] = _results([event], apply=_one_by_one)
        if isinstance(result, PermanentProcessingError):
            raise result
        return result

    def handle_batch(
        self, events: Sequence[InboxEvent]
    ) -> list[HandlerResult | PermanentProcessingError]:
        """A batch of events, given in the order they must apply: every body read and
        validated before anything is written (a rejected event's place holds its
        ``PermanentProcessingError`` and it changes nothing), then the changes applied as a
        set by ``document_changes_apply``, each decided against the state the earlier ones
        left, under the ordering rule; other event types are ``ignored_unsupported``.
        Anything raised concerns the batch: the caller rolls it back."""
        return _results(events, apply=document_changes_apply)

    def sample(self, *, event_id: str) -> SampleEvent:
        now = timezone.now().isoformat().replace("+00:00", "Z")
        body = {
            "event_id": event_id,
            "event_type": "research.document.updated",
            "occurred_at": now,
            "delivered_at": now,
            "delivery_attempt": 1,
            "producer": "send_test_webhook",
            "entity": {
                "entity_id": "doc-demo-1",
                "entity_type": "research_document",
                "source_version": int(time.time()),
            },
            "source": {
                "url": "https://example.org/papers/demo-1",
                "title": "A demo research document",
                "content_hash": "sha256:" + uuid.uuid4().hex,
                "published_at": "2026-01-15T09:00:00Z",
            },
            "data": {
                "summary": "Sent by send_test_webhook.",
                "authors": ["A. Researcher"],
                "citations": [
                    {"text": "Example", "reference_url": "https://example.org/ref/1"}
                ],
            },
        }
        return SampleEvent(event_id=event_id, raw_body=json.dumps(body).encode())


def _one_by_one(
    *, changes: list[tuple[int, DocumentChange]]
) -> list[tuple[Decision, LockedDocument, bool]]:
    return [
        document_change_apply(inbox_event_id=inbox_event_id, change=change)
        for inbox_event_id, change in changes
    ]


def _results(
    events: Sequence[InboxEvent],
    *,
    apply: Callable[..., Sequence[tuple[Decision, LockedDocument, bool]]],
) -> list[HandlerResult | PermanentProcessingError]:
    """The outcome of each event, its change applied by ``apply`` (the set's statement, or
    the ORM one change at a time)."""
    outcomes: list[HandlerResult | PermanentProcessingError | None] = []
    changes: list[tuple[int, DocumentChange]] = []
    for event in events:
        kind = DOCUMENT_EVENT_KINDS.get(event.event_type)
        if kind is None:
            outcomes.append(
                HandlerResult(
                    status=ProcessingStatus.IGNORED_UNSUPPORTED,
                    note=f"unsupported event type {event.event_type[:128]!r}",
                )
            )
            continue
        try:
            change = _document_change(_stored_event(event), kind=kind)
        except PermanentProcessingError as exc:
            outcomes.append(exc)
            continue
        outcomes.append(None)
        changes.append((event.pk, change))
    applied = iter(zip(changes, apply(changes=changes), strict=True))
    results: list[HandlerResult | PermanentProcessingError] = []
    for outcome in outcomes:
        if outcome is not None:
            results.append(outcome)
            continue
        (_, change), (decision, document, was_applied) = next(applied)
        if was_applied:
            results.append(HandlerResult(status=ProcessingStatus.PROCESSED))
        else:
            results.append(
                HandlerResult(
                    status=_STATUS_BY_DECISION[decision],
                    note=_ignored_note(change=change, document=document),
                )
            )
    return results


def _stored_event(event: InboxEvent) -> ResearchEvent:
    """The stored body, read with the rules it passed at ingest."""
    if event.raw_body is None:
        raise PermanentProcessingError(
            "the raw body was purged; the event cannot be processed"
        )
    try:
        body = json.loads(bytes(event.raw_body))
    except (ValueError, UnicodeDecodeError):
        raise PermanentProcessingError("the raw body is not JSON") from None
    except RecursionError:
        # Stored before ingest refused deep bodies: no retry will read it either.
        raise PermanentProcessingError(
            "the raw body is nested too deep to read"
        ) from None
    if not isinstance(body, dict):
        raise PermanentProcessingError("the body is not a JSON object")
    try:
        return research_event_parse(body)
    except InvalidPayload as exc:
        raise PermanentProcessingError(f"invalid envelope: {exc.details}") from None


def _document_change(event: ResearchEvent, *, kind: str) -> DocumentChange:
    deleted = kind == DocumentRevision.Kind.DELETED
    summary: str = ""
    authors: list[str] = []
    citations: list[dict[str, str]] = []
    if not deleted:
        summary, authors, citations = document_data_validate(event.data)
    source = event.source
    return DocumentChange(
        kind=kind,
        entity_id=event.entity_id,
        entity_type=event.entity_type,
        source_version=event.source_version,
        occurred_at=event.occurred_at,
        event_id=event.event_id,
        source_url="" if deleted else source.url,
        title="" if deleted else source.title,
        content_hash=source.content_hash,
        published_at=None if deleted else source.published_at,
        summary=summary,
        authors=authors,
        citations=citations,
    )


def _ignored_note(*, change: DocumentChange, document) -> str:
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
