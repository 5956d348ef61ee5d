"""Integrations: what a source's ``handler`` names (docs/subsystems/inbox.md, "Integrations").

An integration is one package under ``integrations/`` that knows one producer's events:

- ``envelope``: at ingest, reads the verified body into the inbox row's columns, refusing
  what ingest must refuse (``InvalidPayload`` with details);
- ``handle``: at processing, applies one event to its domain, called inside the transaction
  that holds the inbox row's lock, so that the domain change and the event's new status
  commit together. It raises ``core.errors.PermanentProcessingError`` when the data is
  rejected (dead letter at once) and anything else when a retry may help;
- ``handle_batch`` (optional, ``BatchIntegration``): at processing, applies a batch of events
  in the order given, as ``handle`` would one after the other, inside the one transaction that
  then closes them all; it returns per event a ``HandlerResult`` or the
  ``PermanentProcessingError`` that rejects it (validated before anything is written), and
  raises for anything that concerns the batch (the batch is then rolled back and run through
  ``handle`` one event at a time). An integration without it is run per event;
- ``sample``: a body (and the headers beside the signature) that ``send_test_webhook`` signs
  and sends;
- ``headers``: the producer's own headers it reads (beyond the scheme's), each with what it
  means: kept on the inbox row and described in the endpoint's OpenAPI description;
- ``envelope_schema``: the bodies ``envelope`` accepts, as an OpenAPI 3.0 schema, for the
  endpoint's OpenAPI description; ``None`` where the body is the producer's own (any JSON
  object). ``envelope_components``: the named schemas it refers to
  (``#/components/schemas/<name>``).

The registry is the ``WEBHOOK_INTEGRATIONS`` setting, from a name to the integration object's
dotted path, so that the inbox names none of the apps its integrations write to. Adding an
integration is its package and one line there.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from core.errors import PermanentProcessingError

    from .envelopes import Envelope
    from .models import InboxEvent
    from .schemes import Verified


@dataclass(frozen=True)
class HandlerResult:
    status: str  # a terminal ProcessingStatus other than dead_lettered
    note: str = ""


@dataclass(frozen=True)
class SampleEvent:
    event_id: str
    raw_body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class Integration(Protocol):
    name: str
    label: str
    headers: Mapping[str, str]
    envelope_schema: Mapping[str, Any] | None
    envelope_components: Mapping[str, Mapping[str, Any]]

    def envelope(
        self,
        *,
        body: dict,
        raw_body: bytes,
        headers: Mapping[str, str],
        verified: Verified,
    ) -> Envelope: ...

    def handle(self, event: InboxEvent) -> HandlerResult: ...

    def sample(self, *, event_id: str) -> SampleEvent: ...


class BatchIntegration(Integration, Protocol):
    def handle_batch(
        self, events: Sequence[InboxEvent]
    ) -> Sequence[HandlerResult | PermanentProcessingError]: ...


@functools.cache
def integration_get(name: str) -> Integration:
    return import_string(settings.WEBHOOK_INTEGRATIONS[name])


def integration_batch_get(name: str) -> BatchIntegration | None:
    """The integration if it offers ``handle_batch``, else ``None`` (run per event)."""
    integration = integration_get(name)
    return integration if hasattr(integration, "handle_batch") else None  # type: ignore[return-value]


def integration_names() -> list[str]:
    return list(settings.WEBHOOK_INTEGRATIONS)


def integration_choices() -> list[tuple[str, str]]:
    """The ``WebhookSource.handler`` choices: the registered integrations."""
    return [(name, integration_get(name).label) for name in integration_names()]
