import pytest
from django.test import Client

from webhooks.models import HandlerName, SignatureScheme

from .factories import WebhookSourceFactory


@pytest.fixture
def http():
    return Client()


@pytest.fixture
def source(db):
    return WebhookSourceFactory(slug="research-sync")


@pytest.fixture
def standard_source(db):
    return WebhookSourceFactory(
        slug="sw-sync", scheme=SignatureScheme.STANDARD_WEBHOOKS
    )


@pytest.fixture
def github_source(db):
    return WebhookSourceFactory(
        slug="github", scheme=SignatureScheme.GITHUB, handler=HandlerName.GITHUB
    )
