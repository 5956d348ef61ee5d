import pytest
from django.test import Client

from .factories import WebhookSourceFactory


@pytest.fixture
def http():
    return Client()


@pytest.fixture
def standard_source(db):
    return WebhookSourceFactory(slug="sw-sync", scheme="standard-webhooks")
