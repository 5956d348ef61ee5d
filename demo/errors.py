from __future__ import annotations

from core.errors import ServiceError


class DependencyDown(Exception):
    """A demo dependency an event needs is down: a transient error (the event retries, and
    is dead-lettered once its attempts are exhausted)."""


class DependencyUnchanged(ServiceError):
    """A switch to the state the dependency is already in: nothing recorded."""

    status_code = 409
    code = "dependency_unchanged"


class UnknownDependency(ServiceError):
    status_code = 404
    code = "unknown_dependency"
