""" "Replay selected" on the dead-letter list acts on the whole selection ("Select all N"
included), up to ``REPLAY_SELECTED_MAX`` rows; above it, it is refused with a pointer to bulk
replay, before the confirmation page and again after it. 65,536 rows used to fail on the
database's limit of 65,535 parameters per statement."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import connection
from django.urls import reverse

from tests.webhooks.factories import DeadLetteredEventFactory
from trail.models import OperatorAction
from webhooks import replay
from webhooks.models import InboxEvent, ProcessingStatus

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:webhooks_deadletteredevent_changelist"


def dead_letters_copy(count: int) -> None:
    """``count`` dead letters of one source in one statement (copies of one row, each under an
    event id of its own)."""
    template = DeadLetteredEventFactory()
    table = InboxEvent._meta.db_table
    columns = [
        f.column
        for f in InboxEvent._meta.concrete_fields
        if f.column not in ("id", "event_id")
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (event_id, {', '.join(columns)})"  # noqa: S608
            f" SELECT 'copy-' || g, {', '.join(columns)} FROM {table},"
            " generate_series(1, %s) AS g WHERE id = %s",
            [count - 1, template.pk],
        )


def replay_all(http, **fields):
    """ "Select all N" on the dead-letter list, then "Replay selected": the page's rows are
    ticked and ``select_across`` says "all of them"."""
    on_page = InboxEvent.objects.order_by("-received_at", "-id")[:100]
    data = {
        "action": "replay_selected",
        "select_across": "1",
        "index": "0",
        ACTION_CHECKBOX_NAME: [row.pk for row in on_page],
        **fields,
    }
    return http.post(reverse(CHANGELIST), data, follow=True)


def dead_count() -> int:
    return InboxEvent.objects.filter(
        processing_status=ProcessingStatus.DEAD_LETTERED
    ).count()


@pytest.mark.slow  # tens of thousands of rows: make test only (docs/development.md)
def test_replaying_all_of_more_than_65535_rows_is_refused_with_a_pointer_to_bulk_replay(
    operator_client,
):
    dead_letters_copy(65_536)

    first = replay_all(operator_client)
    assert first.status_code == 200
    assert b"Reason" not in first.content  # no confirmation page: refused at once
    assert b"bulk replay" in first.content.lower()
    assert reverse("admin:webhooks_bulkreplayjob_add").encode() in first.content

    # A confirmation posted anyway (an old page, a script) is refused the same way.
    second = replay_all(operator_client, post="yes", reason="all of them")
    assert second.status_code == 200
    assert b"bulk replay" in second.content.lower()
    assert dead_count() == 65_536
    assert not OperatorAction.objects.exists()


def test_select_all_up_to_the_bound_replays_every_row_not_only_the_page(
    operator_client, monkeypatch
):
    monkeypatch.setattr(replay, "REPLAY_SELECTED_MAX", 150)
    dead_letters_copy(150)

    confirm = replay_all(operator_client)
    assert b"Reason" in confirm.content
    assert b"and 130 more" in confirm.content  # 20 shown of 150
    assert b'name="select_across" value="1"' in confirm.content

    done = replay_all(operator_client, post="yes", reason="handler fixed")
    assert b"Replayed 150 event(s)" in done.content
    assert dead_count() == 0
    assert OperatorAction.objects.get().event_count == 150


def test_one_row_over_the_bound_is_refused(operator_client, monkeypatch):
    monkeypatch.setattr(replay, "REPLAY_SELECTED_MAX", 150)
    dead_letters_copy(151)
    response = replay_all(operator_client, post="yes", reason="handler fixed")
    assert b"bulk replay" in response.content.lower()
    assert b"more than 150 events are selected" in response.content.lower()
    assert dead_count() == 151
    assert not OperatorAction.objects.exists()


def test_the_service_refuses_a_selection_over_the_bound(operator, monkeypatch):
    monkeypatch.setattr(replay, "REPLAY_SELECTED_MAX", 3)
    dead_letters_copy(4)
    with pytest.raises(replay.SelectionTooLarge):
        replay.inbox_events_replay(
            events_queryset=InboxEvent.objects.all(), actor=operator, reason="r"
        )
    assert dead_count() == 4
    assert not OperatorAction.objects.exists()
