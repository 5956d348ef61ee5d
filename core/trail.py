"""What core records in the trail of operator actions: an API client created, activated or
deactivated (docs/security.md, "Every change of trust is an operator action").

The trail's one recorder lives in the app that owns ``OperatorAction`` (``webhooks``,
``operator_actions.operator_action_record``), above core; it installs itself here from its
``AppConfig.ready`` (as outboxes and periodic tasks register themselves), so that core names
no app. Without one installed, a change that must be recorded is refused."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .actors import Actor

Recorder = Callable[..., object]
_recorder: Recorder | None = None


def trail_recorder_install(recorder: Recorder) -> None:
    global _recorder
    _recorder = recorder


def trail_record(
    *, action: str, actor: Actor, details: Mapping[str, Any], reason: str = ""
) -> object:
    """Records one operator action, in the caller's transaction, through the installed
    recorder (which checks ``details`` against the action's shape)."""
    if _recorder is None:
        raise ImproperlyConfigured("no recorder of operator actions is installed")
    return _recorder(action=action, actor=actor, details=details, reason=reason)
