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
    *, name: str | None = None, token: str | None = None
) -> tuple[ApiClient, str]:
    """A new API client (a unique name unless given) and its clear token."""
    return api_client_create(
        name=name or f"client-{next(_names)}", token=token, actor=Actor.system()
    )


def bearer_http(token: str) -> APIClient:
    """A DRF test client that sends ``Authorization: Bearer <token>``."""
    http = APIClient()
    http.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return http
