"""The ``demo`` integration: research documents, applied only while the demo's search index
(``demo.services.SEARCH_INDEX``) is up. Everything else is the research integration's: its
envelope, its ordering rules, its revisions."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from integrations.research.integration import ResearchIntegration
from webhooks.integrations import HandlerResult, SampleEvent

from .errors import DependencyDown
from .selectors import demo_dependency_up
from .services import SEARCH_INDEX

if TYPE_CHECKING:
    from webhooks.envelopes import Envelope
    from webhooks.models import InboxEvent
    from webhooks.schemes import Verified

# The document the demo's sample event updates.
SAMPLE_DOCUMENT = "doc-rehearsal-1"


class DemoIntegration:
    name = "demo"
    label = "Research documents, indexed by the demo's search index"
    headers: dict[str, str] = {}

    def __init__(self) -> None:
        self.research = ResearchIntegration()

    def envelope(
        self,
        *,
        body: dict,
        raw_body: bytes,
        headers: Mapping[str, str],
        verified: Verified,
    ) -> Envelope:
        return self.research.envelope(
            body=body, raw_body=raw_body, headers=headers, verified=verified
        )

    def handle(self, event: InboxEvent) -> HandlerResult:
        """The research handler's outcome, once the search index answers; while it is down,
        ``DependencyDown``: a transient error, retried until the attempts are exhausted."""
        if not demo_dependency_up(name=SEARCH_INDEX):
            raise DependencyDown(
                f"the {SEARCH_INDEX} is down (a demo dependency an operator switched "
                "off; switch it back up, then replay)"
            )
        return self.research.handle(event)

    def sample(self, *, event_id: str) -> SampleEvent:
        body = json.loads(self.research.sample(event_id=event_id).raw_body)
        body["entity"]["entity_id"] = SAMPLE_DOCUMENT
        body["source"]["url"] = f"https://example.org/papers/{SAMPLE_DOCUMENT}"
        body["producer"] = "demo rehearsal"
        return SampleEvent(event_id=event_id, raw_body=json.dumps(body).encode())


integration = DemoIntegration()
