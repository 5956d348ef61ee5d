"""What the console's rows refer to: a held event says it is held (a "Held (paused)" badge in
the inbox list and on its page), an operator action names what it was on (the source, deploy
target, API client, job or events, from its record), a resume counts the events it released,
and a bulk replay job's page lists every operator action of the job."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from core.actors import Actor
from tests.webhooks.factories import (
    DeadLetteredEventFactory,
    InboxEventFactory,
    WebhookSourceFactory,
)
from trail.models import OPERATOR_ACTION_WORDS, OperatorAction
from webhooks.bulk_replay import (
    bulk_replay_job_cancel,
    bulk_replay_job_create,
    bulk_replay_job_resume,
    bulk_replay_job_run,
    bulk_replay_job_start,
)
from webhooks.models import (
    BulkReplayJob,
    InboxEvent,
    ProcessingStatus,
)
from webhooks.pausing import webhook_source_pause, webhook_source_resume

pytestmark = pytest.mark.django_db

HELD = 'data-status="held">Held (paused)</span>'


def _row(page: str, text: str) -> str:
    """The changelist row (``<tr>...</tr>``) that contains ``text``."""
    for row in re.findall(r"<tr[ >].*?</tr>", page, flags=re.S):
        if text in row:
            return row
    raise AssertionError(f"no row with {text!r}")


def test_a_held_event_says_so_in_the_list_and_on_its_page(auditor_client, operator):
    paused = WebhookSourceFactory(slug="crm-sync")
    held = InboxEventFactory(source=paused)
    done = InboxEventFactory(
        source=paused, processing_status=ProcessingStatus.PROCESSED
    )
    other = InboxEventFactory(source=WebhookSourceFactory(slug="billing"))
    webhook_source_pause(
        source=paused, reason="CRM maintenance", actor=Actor.of(operator)
    )

    listing = auditor_client.get(
        reverse("admin:webhooks_inboxevent_changelist")
    ).content.decode()
    assert HELD in _row(listing, held.event_id)
    assert 'data-status="received">Received' in _row(listing, held.event_id)
    assert HELD not in _row(listing, done.event_id)  # processed before the pause
    assert HELD not in _row(listing, other.event_id)  # its source is not paused
    page = auditor_client.get(
        reverse("admin:webhooks_inboxevent_change", args=[held.pk])
    ).content.decode()
    status = page[page.index("field-status") :]
    assert HELD in status[: status.index("</div>\n")]

    webhook_source_resume(source=paused, actor=Actor.of(operator))
    listing = auditor_client.get(
        reverse("admin:webhooks_inboxevent_changelist")
    ).content.decode()
    assert HELD not in _row(listing, held.event_id)


def test_operator_actions_say_what_they_were_on_and_a_resume_what_it_released(
    auditor_client, operator
):
    source = WebhookSourceFactory(slug="orders-eu")
    InboxEventFactory.create_batch(4, source=source)
    pause = webhook_source_pause(
        source=source, reason="migration", actor=Actor.of(operator)
    )
    resume = webhook_source_resume(source=source, actor=Actor.of(operator), rate=2)
    listing = auditor_client.get(
        reverse("admin:trail_operatoraction_changelist")
    ).content.decode()
    assert "<th" in listing and ">On</" in listing
    source_page = reverse("admin:webhooks_webhooksource_change", args=[source.pk])
    for action, count in ((pause, "4 held"), (resume, "4 released")):
        row = _row(
            listing, reverse("admin:trail_operatoraction_change", args=[action.pk])
        )
        assert f'source <a href="{source_page}">orders-eu</a>, {count}' in row, row
    page = auditor_client.get(
        reverse("admin:trail_operatoraction_change", args=[resume.pk])
    ).content.decode()
    assert "Resume source by operator (4 released)" in page  # the title
    assert "4 released" in page[page.index("field-events") :]
    assert ">0<" not in page[page.index("field-events") :][:300]


def test_a_bulk_replay_job_page_lists_every_action_of_the_job(auditor_client, operator):
    dead = DeadLetteredEventFactory.create_batch(3)
    actor = Actor.of(operator)
    job = bulk_replay_job_create(
        source=None,
        status=ProcessingStatus.DEAD_LETTERED,
        since=None,
        event_ids=[],
        reason="index fixed",
        created_by=actor,
    )
    job = bulk_replay_job_start(job=job, started_by=actor, publish=False)
    bulk_replay_job_cancel(job_id=job.pk, reason="too early", cancelled_by=actor)
    job = bulk_replay_job_resume(
        job_id=job.pk, resumed_by=actor, reason="go", publish=False
    )
    bulk_replay_job_run(job_id=job.pk, run=job.run)
    job.refresh_from_db()
    assert job.state == BulkReplayJob.State.SUCCEEDED
    actions = list(OperatorAction.objects.filter(bulk_job=job).order_by("pk"))
    assert [a.action for a in actions] == [
        "start_bulk_replay",
        "cancel_bulk_replay",
        "resume_bulk_replay",
        "bulk_replay",
    ]
    assert InboxEvent.objects.filter(pk__in=[e.pk for e in dead]).count() == 3

    page = auditor_client.get(
        reverse("admin:webhooks_bulkreplayjob_change", args=[job.pk])
    ).content.decode()
    trail = page[page.index("field-trail") :]
    trail = trail[: trail.index("</ul>")]
    for action in actions:
        url = reverse("admin:trail_operatoraction_change", args=[action.pk])
        assert url in trail, (action.action, trail)
    assert "Bulk replay (a chunk) by operator: 3 events replayed" in trail
    for words in ("Start bulk replay", "Cancel bulk replay", "Resume bulk replay"):
        assert f"{words} by operator" in trail
    # And the list of all of them, filtered by the job.
    every = reverse("admin:trail_operatoraction_changelist") + f"?bulk_job={job.pk}"
    assert every in page
    listed = auditor_client.get(every)
    assert [a.pk for a in listed.context["cl"].result_list] == sorted(
        (a.pk for a in actions), reverse=True
    )


def test_an_action_s_details_read_in_words_beside_the_record(auditor_client, operator):
    from deployments.models import DeployTarget
    from deployments.targets import deploy_target_save
    from webhooks.replay import inbox_events_replay

    dead = DeadLetteredEventFactory.create_batch(2)
    replay = inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk__in=[e.pk for e in dead]),
        actor=Actor.of(operator),
        reason="fixed",
    )
    target = DeployTarget(
        name="staging-cd", executor="http", url="https://ci.example.com/"
    )
    deploy_target_save(
        target=target, secret="whsec_" + "a" * 32, actor=Actor.of(operator)
    )
    target.priority = 10
    deploy_target_save(target=target, secret=None, actor=Actor.of(operator))
    change = OperatorAction.objects.get(action="change_deploy_target")

    def details(action) -> str:
        page = auditor_client.get(
            reverse("admin:trail_operatoraction_change", args=[action.pk])
        ).content.decode()
        return page[page.index('class="action-details"') :]

    shown = details(replay)
    assert (
        '<th scope="row">status before the replay</th><td>2 Dead-lettered</td>' in shown
    )
    # And as recorded, below: the codes of the record, apart.
    assert '<pre class="as-recorded">' in shown and "dead_lettered" in shown
    shown = details(change)
    assert '<th scope="row">priority</th><td>100 → 10</td>' in shown
    assert (
        '<th scope="row">name</th>' not in shown
    )  # unchanged settings are not repeated


def test_every_operator_action_has_its_words():
    """A new action without an entry would fall back to its code's words: the list, its
    filter and the titles say what the console's vocabulary says (docs/console.md)."""
    missing = [
        action
        for action in OperatorAction.Action.values
        if action not in OPERATOR_ACTION_WORDS
    ]
    assert missing == []
