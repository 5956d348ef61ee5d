"""A web process serves a source and its secrets from what it read last, for at most
WEBHOOK_SOURCE_CACHE_SECONDS: one statement per accepted event instead of two, while a
rotation is seen at once and a source disabled elsewhere within that period."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.actors import Actor
from tests import processes
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import WebhookSourceFactory, signed_post
from webhooks.models import InboxEvent, WebhookSecret, WebhookSource
from webhooks.selectors import webhook_source_snapshot_forget
from webhooks.sources import webhook_source_rotate, webhook_source_set_enabled

pytestmark = pytest.mark.django_db

NEW_SECRET = "rotated-elsewhere-0123456789abcdef"


@pytest.fixture
def cached(settings):
    settings.WEBHOOK_SOURCE_CACHE_SECONDS = 60
    webhook_source_snapshot_forget()
    yield
    webhook_source_snapshot_forget()


@pytest.fixture
def source(db):
    return WebhookSourceFactory(slug="snap")


def test_a_served_source_costs_one_statement_per_event(cached, source):
    http = Client()
    assert signed_post(http, "snap", research_event()).status_code == 202
    with CaptureQueriesContext(connection) as queries:
        assert signed_post(http, "snap", research_event()).status_code == 202
    sources = [q for q in queries if WebhookSource._meta.db_table in q["sql"]]
    assert sources == []
    assert len(queries) == 1  # the upsert


def test_without_the_snapshot_every_request_reads_the_source(settings, source):
    settings.WEBHOOK_SOURCE_CACHE_SECONDS = 0
    http = Client()
    assert signed_post(http, "snap", research_event()).status_code == 202
    with CaptureQueriesContext(connection) as queries:
        assert signed_post(http, "snap", research_event()).status_code == 202
    assert len(queries) == 2


def test_a_secret_rotated_in_another_process_verifies_at_once(cached, source):
    http = Client()
    assert signed_post(http, "snap", research_event()).status_code == 202
    # Another process rotates: this one's snapshot does not know the new secret yet.
    WebhookSecret.objects.create(source=source, secret=NEW_SECRET)

    response = signed_post(http, "snap", research_event(), secret=NEW_SECRET)

    assert response.status_code == 202, response.content
    # And a signature no secret verifies is still refused.
    assert (
        signed_post(http, "snap", research_event(), secret="wrong").status_code == 401
    )


def test_a_source_disabled_here_answers_404_at_once(cached, source):
    http = Client()
    assert signed_post(http, "snap", research_event()).status_code == 202
    webhook_source_set_enabled(source=source, enabled=False, actor=Actor.system())
    assert signed_post(http, "snap", research_event()).status_code == 404


def test_a_source_disabled_elsewhere_answers_404_within_the_period(settings, source):
    settings.WEBHOOK_SOURCE_CACHE_SECONDS = 0.1
    webhook_source_snapshot_forget()
    http = Client()
    assert signed_post(http, "snap", research_event()).status_code == 202
    WebhookSource.objects.filter(pk=source.pk).update(is_enabled=False)
    time.sleep(0.15)
    assert signed_post(http, "snap", research_event()).status_code == 404
    assert InboxEvent.objects.count() == 1


@pytest.mark.slow
def test_a_grace_period_ending_is_honoured_from_the_snapshot(cached, source):
    """The snapshot keeps each secret's expiry: an old secret stops verifying when its grace
    ends, whatever the snapshot's age."""
    http = Client()
    webhook_source_rotate(
        source=source, secret=NEW_SECRET, grace_seconds=3600, actor=Actor.system()
    )
    assert signed_post(http, "snap", research_event()).status_code == 202  # old secret
    # A second of grace left: room for the delivery below on a busy machine.
    ends = timezone.now() + timedelta(seconds=1)
    WebhookSecret.objects.exclude(secret=NEW_SECRET).update(expires_at=ends)
    webhook_source_snapshot_forget()
    assert signed_post(http, "snap", research_event()).status_code == 202
    processes.wait_until(lambda: timezone.now() > ends, interval=0.05, what="grace end")
    assert signed_post(http, "snap", research_event()).status_code == 401
    assert (
        signed_post(http, "snap", research_event(), secret=NEW_SECRET).status_code
        == 202
    )
