"""Every change of who and what the inbox trusts is an operator action with the state before
and after (docs/security.md, "Every change of trust is an operator action"): a source
created, enabled, disabled, its expected delivery interval; an API client created,
deactivated, activated. A disable returns once every web process answers 404."""

from __future__ import annotations

import threading
import time

import pytest
import requests
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from core.actors import Actor
from core.models import ApiClient
from tests import processes
from tests.console import admin_action
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import WebhookSourceFactory, encode, signed_headers
from trail.api_clients import api_client_create
from trail.models import OperatorAction
from webhooks.models import WebhookSource
from webhooks.sources import (
    webhook_source_expected_interval_set,
    webhook_source_set_enabled,
)

pytestmark = pytest.mark.django_db

SOURCES = "webhooks_webhooksource"
STRONG = "a-secret-of-plenty-of-bytes-0123"


def actions(kind: str) -> list[OperatorAction]:
    return list(OperatorAction.objects.filter(action=kind).order_by("pk"))


def test_a_source_created_by_a_command_is_recorded_without_its_secret(capsys):
    call_command(
        "webhook_source", "create", "lab", "--handler", "research", "--secret", STRONG
    )
    (action,) = actions("create_source")
    source = WebhookSource.objects.get(slug="lab")
    assert action.actor_name.startswith("os:")
    assert action.details == {
        "source": "lab",
        "source_id": source.pk,
        "scheme": "hmac-sha256",
        "handler": "research",
        "client": None,
    }
    assert STRONG not in str(action.details) + action.reason


def test_disable_and_enable_record_before_and_after_and_nothing_when_unchanged(
    settings,
):
    settings.WEBHOOK_SOURCE_CACHE_SECONDS = 0
    source = WebhookSourceFactory(slug="lab")
    actor = Actor(name="os:oncall")
    disabled = webhook_source_set_enabled(
        source=source, enabled=False, actor=actor, reason="leaked secret"
    )
    assert (disabled.action, disabled.actor_name, disabled.reason) == (
        "disable_source",
        "os:oncall",
        "leaked secret",
    )
    assert (disabled.details["before"], disabled.details["after"]) == (True, False)
    assert webhook_source_set_enabled(source=source, enabled=False, actor=actor) is None
    enabled = webhook_source_set_enabled(source=source, enabled=True, actor=actor)
    assert (enabled.action, enabled.details["after"]) == ("enable_source", True)
    assert len(actions("disable_source")) == 1


def test_the_expected_interval_records_before_and_after(operator, operator_client):
    source = WebhookSourceFactory(slug="lab")
    webhook_source_expected_interval_set(
        source=source, seconds=3600, actor=Actor.of(operator)
    )
    page = reverse(f"admin:{SOURCES}_change", args=[source.pk])
    operator_client.post(page, {"expected_delivery_interval_seconds": "600"})
    first, second = actions("set_expected_interval")
    assert (first.details["before"], first.details["after"]) == (None, 3600)
    assert (second.details["before"], second.details["after"]) == (3600, 600)
    assert second.actor == operator


def test_an_operator_disables_a_source_from_the_admin_and_an_auditor_cannot(
    settings, operator_client, auditor
):
    settings.WEBHOOK_SOURCE_CACHE_SECONDS = 0
    source = WebhookSourceFactory(slug="lab")
    auditor_client = Client()
    auditor_client.force_login(auditor)
    admin_action(
        auditor_client, SOURCES, "disable_selected", source, post="yes", reason="x"
    )
    assert WebhookSource.objects.get(pk=source.pk).is_enabled
    page = admin_action(operator_client, SOURCES, "disable_selected", source)
    assert b'name="reason"' in page.content
    response = admin_action(
        operator_client,
        SOURCES,
        "disable_selected",
        source,
        post="yes",
        reason="producer compromised",
        follow=True,
    )
    assert b"Disabled lab" in response.content
    assert not WebhookSource.objects.get(pk=source.pk).is_enabled
    (action,) = actions("disable_source")
    assert (action.actor_name, action.reason) == ("operator", "producer compromised")


def test_an_api_client_created_and_deactivated_is_recorded(
    capsys, django_user_model, client
):
    call_command("api_client", "create", "ci-tool")
    (created,) = actions("create_api_client")
    api_client = ApiClient.objects.get(name="ci-tool")
    assert created.details == {
        "client": "ci-tool",
        "client_id": api_client.pk,
        "token_prefix": api_client.token_prefix,
        "role": "ci",
    }
    admin = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(admin)
    page = reverse("admin:core_apiclient_change", args=[api_client.pk])
    client.post(page, {"is_active": "", "role": "ci"})
    assert not ApiClient.objects.get(pk=api_client.pk).is_active
    (deactivated,) = actions("deactivate_api_client")
    assert (deactivated.actor, deactivated.details["before"]) == (admin, True)
    assert deactivated.details["after"] is False
    # Its role, from the same page: one operator action, the admin user its actor.
    client.post(page, {"is_active": "", "role": "auditor"})
    assert ApiClient.objects.get(pk=api_client.pk).role == "auditor"
    (role_set,) = actions("set_api_client_role")
    assert (role_set.actor, role_set.details["before"], role_set.details["after"]) == (
        admin,
        "ci",
        "auditor",
    )
    assert len(actions("deactivate_api_client")) == 1


def test_a_token_may_come_from_a_file(tmp_path, capsys):
    token_file = tmp_path / "token"
    token_file.write_text("file-token-0123456789abcdef0123456789\n")
    call_command("api_client", "create", "tool", "--token-file", str(token_file))
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "file-token-0123456789abcdef0123456789"


def test_api_client_create_in_code_records_the_actor_given():
    api_client, _ = api_client_create(name="svc", actor=Actor(name="deploy-script"))
    (created,) = actions("create_api_client")
    assert (created.actor_name, created.details["client_id"]) == (
        "deploy-script",
        api_client.pk,
    )


@pytest.mark.django_db(transaction=True)
def test_a_disable_returns_once_the_cache_period_has_passed(settings):
    """In this process the snapshot is forgotten at once; the others keep theirs for up to
    ``WEBHOOK_SOURCE_CACHE_SECONDS``, which the disable waits out before it returns."""
    settings.WEBHOOK_SOURCE_CACHE_SECONDS = 0.5
    source = WebhookSourceFactory(slug="lab")
    started = time.monotonic()
    webhook_source_set_enabled(source=source, enabled=False, actor=Actor.system())
    assert time.monotonic() - started >= 0.5
    # An enable narrows nothing: it does not wait out a period, even a long one.
    settings.WEBHOOK_SOURCE_CACHE_SECONDS = 60
    started = time.monotonic()
    webhook_source_set_enabled(source=source, enabled=True, actor=Actor.system())
    assert time.monotonic() - started < 30  # half the period: room for a busy machine


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_disable_is_in_effect_in_every_web_process_when_the_command_returns(tmp_path):
    """gunicorn with four workers, each keeping the source for five seconds and kept busy
    with deliveries while ``webhook_source disable`` runs: every one of them answers 404 as
    soon as the command has returned."""
    secret = "live-secret-0123456789abcdef"
    WebhookSourceFactory(slug="live", secret=secret)
    port = processes.free_port()
    server = processes.gunicorn(
        tmp_path,
        port=port,
        workers=4,
        env={"WEBHOOK_SOURCE_CACHE_SECONDS": "5", "LOG_LEVEL": "WARNING"},
    ).start()
    base = f"http://127.0.0.1:{port}"

    def deliver() -> int:
        body = research_event()
        raw = encode(body)
        headers = signed_headers(raw_body=raw, secret=secret, event_id=body["event_id"])
        return requests.post(
            f"{base}/webhooks/live/", data=raw, headers=headers, timeout=10
        ).status_code

    done = threading.Event()

    def keep_delivering() -> None:
        while not done.is_set():
            deliver()

    try:
        processes.wait_http_ok(f"{base}/healthz", timeout=30)
        assert {deliver() for _ in range(40)} == {202}
        busy = threading.Thread(target=keep_delivering, daemon=True)
        busy.start()
        try:
            processes.manage(
                "webhook_source",
                "disable",
                "live",
                env=processes.child_env(WEBHOOK_SOURCE_CACHE_SECONDS="5"),
                check=True,
            )
        finally:
            done.set()
            busy.join(timeout=30)
        assert {deliver() for _ in range(40)} == {404}
    finally:
        server.stop()
