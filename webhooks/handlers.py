"""The registry of domain handlers: a source's ``handler`` names one.

A handler is a function ``(event: InboxEvent) -> HandlerResult``, called by the processing
service inside the transaction that holds the inbox row's lock, so the domain change and the new
status commit together. It raises ``core.errors.PermanentProcessingError`` when the data is
rejected (dead-letter at once) and ``TransientProcessingError`` (or any other exception) when a
retry may help. Adding a handler is one module and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from .models import InboxEvent

HANDLERS: dict[str, str] = {
    "research": "research.handlers.research_event_handle",
    "github": "deployments.handlers.github_event_handle",
}


@dataclass(frozen=True)
class HandlerResult:
    status: str  # a terminal ProcessingStatus other than dead_lettered
    note: str = ""
    details: dict = field(default_factory=dict)


def handler_get(name: str) -> Callable[[InboxEvent], HandlerResult]:
    return import_string(HANDLERS[name])
