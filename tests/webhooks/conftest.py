import pytest
from django.test import Client

from .factories import WebhookSourceFactory


@pytest.fixture
def http():
    return Client()


@pytest.fixture
def source(db):
    return WebhookSourceFactory(slug="research-sync")


@pytest.fixture
def standard_source(db):
    return WebhookSourceFactory(slug="sw-sync", scheme="standard-webhooks")


@pytest.fixture
def github_source(db):
    return WebhookSourceFactory(slug="github", scheme="github", handler="github")
