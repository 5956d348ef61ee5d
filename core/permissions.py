"""Roles on every API endpoint (docs/http-api.md, "Roles").

Every DRF view under /api/ declares who may read it (``read_roles``: GET, HEAD, OPTIONS) and
who may change through it (``write_roles``: every other method); ``RoleRequired``, the
default permission class, refuses everyone else with 403 ``forbidden``. A view that declares
nothing is refused to every client: a new endpoint is closed until its roles are written.
"""

from __future__ import annotations

from rest_framework.permissions import SAFE_METHODS, BasePermission

from .models import ApiRole

EVERY_ROLE = frozenset(ApiRole)
# The operator API's reads, and every other read of the whole trail.
OPS_READERS = frozenset({ApiRole.OPERATOR, ApiRole.AUDITOR})
OPERATORS = frozenset({ApiRole.OPERATOR})
CI = frozenset({ApiRole.CI})
NOBODY: frozenset[str] = frozenset()


def view_roles(view: object, method: str) -> frozenset[str]:
    """The roles ``view`` lets use ``method`` (none when it declares none)."""
    name = "read_roles" if method in SAFE_METHODS else "write_roles"
    return frozenset(getattr(view, name, NOBODY))


def client_may(client: object, view: object, method: str) -> bool:
    """Whether an authenticated API client's role lets it use ``method`` on ``view``."""
    return getattr(client, "role", None) in view_roles(view, method)


class RoleRequired(BasePermission):
    """An authenticated API client whose role the view names for the method (else DRF
    answers 401 without a valid token, 403 ``forbidden`` with one)."""

    def has_permission(self, request, view) -> bool:
        client = request.user
        if client is None or not getattr(client, "is_authenticated", False):
            return False
        return client_may(client, view, request.method)
