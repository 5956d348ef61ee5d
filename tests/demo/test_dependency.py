"""The demo's dependency (demo/): switched down and back up by an operator in the console or
by ``demo_dependency``, each switch an operator action; the ``demo`` integration's events
fail while it is down, are dead-lettered once their attempts are exhausted (a cause a replay
can fix: the event's page offers a plain replay), and a replay once it is back processes
them."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from core.actors import Actor
from demo.errors import DependencyUnchanged
from demo.models import DemoDependency
from demo.services import SEARCH_INDEX, demo_dependency_ensure, demo_dependency_switch
from research.models import DocumentRevision
from tests.console import admin_action
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import InboxEventFactory, WebhookSourceFactory
from trail.models import OperatorAction
from webhooks.models import DeadLetterCause, ProcessingStatus
from webhooks.processing import inbox_event_process
from webhooks.replay import inbox_events_replay

pytestmark = pytest.mark.django_db

DEPENDENCIES = "demo_demodependency"


@pytest.fixture
def index():
    return demo_dependency_ensure(name=SEARCH_INDEX)


@pytest.fixture
def demo_source():
    return WebhookSourceFactory(slug="demo-indexed", handler="demo")


def switches() -> list[tuple[str, bool, str]]:
    return [
        (a.actor_name, a.details["up"], a.reason)
        for a in OperatorAction.objects.filter(action="switch_dependency").order_by(
            "pk"
        )
    ]


def test_an_operator_switches_the_index_down_and_up_in_the_console(
    operator_client, index
):
    page = admin_action(operator_client, DEPENDENCIES, "switch_down", index)
    assert b'name="reason"' in page.content  # the confirmation asks why
    admin_action(
        operator_client,
        DEPENDENCIES,
        "switch_down",
        index,
        post="yes",
        reason="rehearsal: the index is down",
    )
    index.refresh_from_db()
    assert (index.is_up, index.changed_by_name) == (False, "operator")
    listing = operator_client.get(reverse(f"admin:{DEPENDENCIES}_changelist"))
    assert b'data-status="down">Down</span>' in listing.content
    admin_action(
        operator_client,
        DEPENDENCIES,
        "switch_up",
        index,
        post="yes",
        reason="rehearsal: the index is back",
    )
    index.refresh_from_db()
    assert index.is_up
    assert switches() == [
        ("operator", False, "rehearsal: the index is down"),
        ("operator", True, "rehearsal: the index is back"),
    ]


def test_an_auditor_sees_the_dependencies_and_cannot_switch_them(auditor_client, index):
    listing = auditor_client.get(reverse(f"admin:{DEPENDENCIES}_changelist"))
    assert listing.status_code == 200
    assert b"search-index" in listing.content
    assert b"switch_down" not in listing.content
    admin_action(
        auditor_client,
        DEPENDENCIES,
        "switch_down",
        index,
        post="yes",
        reason="forged",
    )
    index.refresh_from_db()
    assert index.is_up and switches() == []


def test_the_command_switches_and_refuses_what_changes_nothing(index, capsys):
    call_command("demo_dependency", "down", SEARCH_INDEX, "--reason", "rehearsal")
    assert "is down (operator action #" in capsys.readouterr().out
    with pytest.raises(CommandError, match="already down"):
        call_command("demo_dependency", "down", SEARCH_INDEX, "--reason", "again")
    with pytest.raises(CommandError, match="no demo dependency"):
        call_command("demo_dependency", "up", "no-such-thing", "--reason", "r")
    with pytest.raises(DependencyUnchanged):
        demo_dependency_switch(
            name=SEARCH_INDEX, up=False, actor=Actor.system(), reason="again"
        )
    [(actor, up, reason)] = switches()
    assert actor.startswith("os:") and (up, reason) == (False, "rehearsal")


def test_an_event_fails_while_the_index_is_down_and_a_replay_processes_it_once_up(
    settings, operator_client, index, demo_source
):
    settings.INBOX_MAX_ATTEMPTS = 2
    demo_dependency_switch(
        name=SEARCH_INDEX, up=False, actor=Actor.system(), reason="rehearsal"
    )
    event = InboxEventFactory(
        source=demo_source, body=research_event(entity_id="doc-rehearsal-1")
    )

    assert inbox_event_process(inbox_event_id=event.pk).status == "failed"
    event.refresh_from_db()
    assert event.error_message.startswith("DependencyDown: the search-index is down")
    event.__class__.objects.filter(pk=event.pk).update(next_attempt_at=None)
    assert inbox_event_process(inbox_event_id=event.pk).status == "dead_lettered"
    event.refresh_from_db()
    assert event.dead_letter_cause == DeadLetterCause.EXHAUSTED
    # A cause a replay can fix: the page offers a plain replay, no warning.
    page = operator_client.get(
        reverse("admin:webhooks_inboxevent_change", args=[event.pk])
    )
    assert b'value="Replay"' in page.content
    assert b"A replay will most likely fail" not in page.content

    demo_dependency_switch(
        name=SEARCH_INDEX, up=True, actor=Actor.system(), reason="back"
    )
    inbox_events_replay(
        events_queryset=event.__class__.objects.filter(pk=event.pk),
        actor=Actor.system(),
        reason="the index is back",
        repeats_confirmed=False,
    )
    assert inbox_event_process(inbox_event_id=event.pk).status == (
        ProcessingStatus.PROCESSED
    )
    assert DocumentRevision.objects.filter(
        inbox_event=event, document__entity_id="doc-rehearsal-1"
    ).exists()


def test_demo_setup_creates_the_rehearsals_source_and_its_index_up():
    call_command("demo_setup", "--force")
    call_command("demo_setup", "--force")  # idempotent
    assert DemoDependency.objects.get(name=SEARCH_INDEX).is_up
    from webhooks.models import WebhookSource

    assert WebhookSource.objects.get(slug="demo-indexed").handler == "demo"
