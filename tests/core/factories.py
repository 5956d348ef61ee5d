"""API clients, created through the service the ``api_client`` command uses, and the DRF test
client that authenticates as one."""

from __future__ import annotations

import itertools

from rest_framework.test import APIClient

from core.actors import Actor
from core.models import ApiClient
from trail.api_clients import api_client_create

_names = itertools.count(1)


def api_client_make(
    *, name: str | None = None, token: str | None = None, role: str = "ci"
) -> tuple[ApiClient, str]:
    """A new API client (a unique name unless given, of ``role``) and its clear token."""
    return api_client_create(
        name=name or f"client-{next(_names)}",
        token=token,
        actor=Actor.system(),
        role=role,
    )


def role_http(role: str) -> APIClient:
    """A DRF test client authenticated as a new API client of ``role``."""
    _, token = api_client_make(role=role)
    return bearer_http(token)


def bearer_http(token: str) -> APIClient:
    """A DRF test client that sends ``Authorization: Bearer <token>``."""
    http = APIClient()
    http.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return http
