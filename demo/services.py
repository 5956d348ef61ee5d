from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from core.errors import InvalidPayload
from trail.models import OperatorAction
from trail.services import SwitchDependencyDetails, operator_action_record

from .errors import DependencyUnchanged, UnknownDependency
from .models import DemoDependency

logger = logging.getLogger(__name__)

# The dependency of the demo integration: its events are indexed for search.
SEARCH_INDEX = "search-index"


def demo_dependency_ensure(
    *, name: str = SEARCH_INDEX, description: str = ""
) -> DemoDependency:
    """The dependency ``name``, created up when missing (idempotent)."""
    dependency, _ = DemoDependency.objects.get_or_create(
        name=name, defaults={"description": description}
    )
    return dependency


@transaction.atomic
def demo_dependency_switch(
    *, name: str, up: bool, actor: Actor, reason: str
) -> OperatorAction:
    """Switches the dependency ``name`` down (``up`` false: the demo integration's events
    fail until it is back) or back up, under its row lock, and records the operator action
    (``switch_dependency``: who, why, which dependency, its state before and after) in the
    same transaction. Raises ``UnknownDependency`` for a name without a row,
    ``DependencyUnchanged`` (recording nothing) when it already is so, ``InvalidPayload``
    for a blank reason."""
    reason = (reason or "").strip()
    if not reason:
        raise InvalidPayload("a reason is required", details={"reason": "required"})
    dependency = DemoDependency.objects.select_for_update().filter(name=name).first()
    if dependency is None:
        raise UnknownDependency(f"no demo dependency {name!r}")
    if dependency.is_up == up:
        raise DependencyUnchanged(
            f"demo dependency {name!r} is already {'up' if up else 'down'}"
        )
    DemoDependency.objects.filter(pk=dependency.pk).update(
        is_up=up, changed_at=timezone.now(), **actor.columns("changed_by")
    )
    action = operator_action_record(
        action=OperatorAction.Action.SWITCH_DEPENDENCY,
        actor=actor,
        reason=reason,
        details=SwitchDependencyDetails(dependency=name, up=up),
    )
    logger.info(
        "demo_dependency.switched",
        extra={"dependency": name, "up": up, "actor": actor.name},
    )
    return action
