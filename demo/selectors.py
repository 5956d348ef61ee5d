from __future__ import annotations

from .models import DemoDependency


def demo_dependency_up(*, name: str) -> bool:
    """Whether the dependency ``name`` is up (one without a row is)."""
    state = DemoDependency.objects.filter(name=name).values_list("is_up", flat=True)
    return next(iter(state), True)
