import pytest
from rest_framework.test import APIClient

from core.services import api_client_create


@pytest.fixture
def api_client_token(db):
    """An API client and its clear token."""
    client, token = api_client_create(name="ci", token="test-token-ci-0123456789abcdef")
    return client, token


@pytest.fixture
def api(api_client_token):
    """A DRF test client authenticated as the ``ci`` API client."""
    _, token = api_client_token
    http = APIClient()
    http.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return http
