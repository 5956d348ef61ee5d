import pytest

from core.services import api_client_create
from tests.core.factories import bearer_http
from tests.webhooks.factories import research_source


@pytest.fixture
def api_client_token(db):
    """An API client and its clear token."""
    client, token = api_client_create(name="ci", token="test-token-ci-0123456789abcdef")
    return client, token


@pytest.fixture
def api(api_client_token):
    """A DRF test client authenticated as the ``ci`` API client."""
    _, token = api_client_token
    return bearer_http(token)


@pytest.fixture
def other_api(db):
    """A second API client, to prove that keys and resources are scoped per client."""
    _, token = api_client_create(name="other", token="test-token-other-0123456789abcd")
    return bearer_http(token)


@pytest.fixture
def source(db):
    """The research source (``research-sync``) with its test secret."""
    return research_source()
