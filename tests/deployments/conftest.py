import pytest
from rest_framework.test import APIClient

from core.services import api_client_create


@pytest.fixture
def other_api(db):
    """A second API client, to prove that keys and resources are scoped per client."""
    _, token = api_client_create(name="other", token="test-token-other-0123456789abcd")
    http = APIClient()
    http.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return http


def deployment_body(**overrides) -> dict:
    body = {
        "repository": "acme/payment-service",
        "commit_sha": "abc123def456",
        "environment": "staging",
        "workflow": "deploy.yml",
        "triggered_by": "github-actions",
    }
    body.update(overrides)
    return body


def build_body(**overrides) -> dict:
    body = {
        "repository": "acme/payment-service",
        "commit_sha": "abc123def456",
        "ref": "refs/heads/main",
        "workflow": "build.yml",
        "triggered_by": "github-actions",
    }
    body.update(overrides)
    return body
