"""Pausing and resuming sources from the audit console: operators only (the action hidden
from auditors and refused to them), the paused state on the sources list, on a held event's
page and on the dashboard, and the pause and resume actions in the sealed trail."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.sealer import ledger_rows_seal
from audit.selectors import dashboard_figures
from core.actors import Actor
from tests.audit.tampering import sql, verify_fails
from tests.console import admin_action
from tests.webhooks.factories import (
    InboxEventFactory,
    WebhookSourceFactory,
    hold_of,
    paused_at_of,
)
from trail.models import OperatorAction
from webhooks.models import SourceHold
from webhooks.pausing import webhook_source_pause, webhook_source_resume

pytestmark = pytest.mark.django_db

SOURCES = "webhooks_webhooksource"


def action_choices(http) -> list[str]:
    page = http.get(reverse(f"admin:{SOURCES}_changelist"))
    assert page.status_code == 200
    form = page.context["action_form"]
    return [choice for choice, _ in form.fields["action"].choices] if form else []


@pytest.fixture
def papers():
    return WebhookSourceFactory(slug="papers")


def test_operator_pauses_a_source_with_a_reason_and_sees_it_paused(
    operator_client, operator, papers
):
    InboxEventFactory.create_batch(3, source=papers)
    assert {"pause_selected", "resume_selected"} <= set(action_choices(operator_client))
    page = admin_action(operator_client, SOURCES, "pause_selected", papers)
    assert page.status_code == 200
    assert b'name="reason"' in page.content  # the confirmation asks why

    response = admin_action(
        operator_client,
        SOURCES,
        "pause_selected",
        papers,
        follow=True,
        post="yes",
        reason="the indexer is down",
    )
    assert b"Paused papers" in response.content
    hold = hold_of(papers)
    assert hold.paused_at is not None
    assert (hold.paused_by, hold.paused_by_name, hold.pause_reason) == (
        operator,
        "operator",
        "the indexer is down",
    )
    action = OperatorAction.objects.get(action="pause_source")
    assert (action.actor, action.reason) == (operator, "the indexer is down")
    assert action.details["source"] == "papers"
    assert action.details["held_events"] == 3

    listing = operator_client.get(reverse(f"admin:{SOURCES}_changelist")).content
    assert b"the indexer is down" in listing
    assert b'<td class="field-held_events">3</td>' in listing


def test_a_pause_without_a_reason_changes_nothing(operator_client, papers):
    response = admin_action(
        operator_client, SOURCES, "pause_selected", papers, post="yes", reason=""
    )
    assert response.status_code == 200  # the confirmation again, with the error
    assert b"This field is required" in response.content
    assert hold_of(papers) is None
    assert not OperatorAction.objects.exists()


def test_operator_resumes_with_a_rate_or_without(operator_client, operator):
    slow, fast = WebhookSourceFactory(slug="slow"), WebhookSourceFactory(slug="fast")
    for source in (slow, fast):
        webhook_source_pause(source=source, reason="down", actor=Actor.of(operator))

    admin_action(
        operator_client, SOURCES, "resume_selected", slow, post="yes", rate="5"
    )
    admin_action(operator_client, SOURCES, "resume_selected", fast, post="yes")
    slow, fast = hold_of(slow), hold_of(fast)
    assert (slow.paused_at, slow.drain_rate) == (None, 5.0)
    assert (fast.paused_at, fast.drain_rate) == (None, None)
    assert fast.drain_started_at is not None
    rates = OperatorAction.objects.filter(action="resume_source").order_by("pk")
    assert [a.details["rate"] for a in rates] == [5.0, None]
    assert [a.actor for a in rates] == [operator, operator]
    listing = operator_client.get(reverse(f"admin:{SOURCES}_changelist")).content
    assert b'<td class="field-held_events">0 (draining)</td>' in listing


def test_resuming_a_source_that_is_not_paused_says_so_and_records_nothing(
    operator_client, papers
):
    response = admin_action(
        operator_client, SOURCES, "resume_selected", papers, post="yes", follow=True
    )
    assert b"Not resumed: papers" in response.content
    assert not OperatorAction.objects.exists()


def test_auditor_sees_the_paused_state_and_cannot_pause_or_resume(
    auditor_client, operator, papers
):
    other = WebhookSourceFactory(slug="other")
    webhook_source_pause(
        source=papers, reason="the indexer is down", actor=Actor.of(operator)
    )
    choices = action_choices(auditor_client)
    assert "pause_selected" not in choices and "resume_selected" not in choices
    listing = auditor_client.get(reverse(f"admin:{SOURCES}_changelist")).content
    assert b"the indexer is down" in listing

    # Posted by hand, the actions are refused: nothing changes, nothing is recorded.
    admin_action(
        auditor_client, SOURCES, "pause_selected", other, post="yes", reason="r"
    )
    admin_action(auditor_client, SOURCES, "resume_selected", papers, post="yes")
    assert paused_at_of(other) is None
    assert paused_at_of(papers) is not None
    assert OperatorAction.objects.count() == 1


def test_a_held_events_page_says_why_it_waits(operator_client, operator, papers):
    event = InboxEventFactory(source=papers)
    processed = InboxEventFactory(source=papers, processing_status="processed")
    webhook_source_pause(
        source=papers, reason="the indexer is down", actor=Actor.of(operator)
    )

    page = operator_client.get(
        reverse("admin:webhooks_inboxevent_change", args=[event.pk])
    ).content.decode()
    assert "held: source paused since" in page
    assert "by operator (the indexer is down)" in page
    page = operator_client.get(
        reverse("admin:webhooks_inboxevent_change", args=[processed.pk])
    ).content.decode()
    assert "held: source paused" not in page


def test_the_dashboard_lists_the_paused_sources(auditor_client, operator, papers):
    quiet = WebhookSourceFactory(slug="quiet")
    page = auditor_client.get(reverse("admin:index")).content.decode()
    assert "Paused sources" in page
    assert "No source is paused." in page

    InboxEventFactory.create_batch(2, source=papers)
    InboxEventFactory(source=papers, processing_status="processed")
    webhook_source_pause(
        source=papers, reason="the indexer is down", actor=Actor.of(operator)
    )
    webhook_source_pause(
        source=quiet, reason="noisy producer", actor=Actor.of(operator)
    )
    SourceHold.objects.filter(source=quiet).update(
        paused_at=timezone.now() - timedelta(hours=1)
    )

    rows = dashboard_figures()["paused_sources"]
    assert [(r["slug"], r["by"], r["reason"], r["waiting"]) for r in rows] == [
        ("quiet", "operator", "noisy producer", 0),
        ("papers", "operator", "the indexer is down", 2),
    ]
    page = auditor_client.get(reverse("admin:index")).content.decode()
    assert "No source is paused." not in page
    assert 'data-source="papers"' in page and "the indexer is down" in page


def test_the_waiting_count_is_bounded(monkeypatch, operator, papers):
    InboxEventFactory.create_batch(4, source=papers)
    webhook_source_pause(source=papers, reason="down", actor=Actor.of(operator))
    monkeypatch.setattr("audit.selectors.COUNT_CAP", 3)
    (row,) = dashboard_figures()["paused_sources"]
    assert (row["waiting"], row["waiting_capped"]) == (3, True)


def test_audit_verify_names_an_altered_pause_or_resume_action(capsys, operator):
    source = WebhookSourceFactory(slug="papers")
    paused = webhook_source_pause(
        source=source, reason="down", actor=Actor.of(operator)
    )
    resumed = webhook_source_resume(source=source, rate=3, actor=Actor.of(operator))
    ledger_rows_seal(now=timezone.now() + timedelta(minutes=5))
    table = OperatorAction._meta.db_table
    sql(
        f"UPDATE {table} SET details = jsonb_set(details, '{{source}}', '\"other\"')"  # noqa: S608
        " WHERE id = %s",
        [paused.pk],
    )
    sql(f"UPDATE {table} SET reason = 'nothing to see' WHERE id = %s", [resumed.pk])  # noqa: S608

    err = verify_fails(capsys)
    assert f"ALTERED operator action {paused.pk}" in err
    assert f"ALTERED operator action {resumed.pk}" in err
