"""purge_inbox: old terminal rows lose their raw body and keep their metadata."""

import getpass
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.webhooks.factories import InboxEventFactory
from trail.models import OperatorAction
from webhooks.models import InboxEvent
from webhooks.retention import purge_stamp

pytestmark = pytest.mark.django_db

TERMINAL = [
    "processed",
    "ignored_out_of_order",
    "ignored_duplicate_version",
    "ignored_unsupported",
    "dead_lettered",
]


def test_purges_old_terminal_bodies_in_batches_and_keeps_metadata(capsys):
    old = timezone.now() - timedelta(days=40)
    purgeable = [
        InboxEventFactory(received_at=old, processing_status=status)
        for status in TERMINAL
        for _ in range(3)
    ]
    kept_pending = [
        InboxEventFactory(received_at=old, processing_status=s)
        for s in ("received", "processing", "failed")
    ]
    kept_recent = InboxEventFactory(
        received_at=timezone.now() - timedelta(days=2),
        processing_status="processed",
    )
    metadata_before = {
        e.pk: (e.event_id, e.payload_hash, e.content_fingerprint, e.processing_status)
        for e in purgeable
    }

    call_command("purge_inbox", "--older-than", "30", "--batch-size", "4")

    out = capsys.readouterr().out
    assert "Purged the raw bodies of 15 terminal events" in out
    assert out.count("so far") == 4  # 15 rows in batches of 4
    for event in InboxEvent.objects.filter(pk__in=metadata_before):
        assert event.raw_body is None
        assert event.body_purged_at is not None
        assert metadata_before[event.pk] == (
            event.event_id,
            event.payload_hash,
            event.content_fingerprint,
            event.processing_status,
        )
    for event in [*kept_pending, kept_recent]:
        fresh = InboxEvent.objects.get(pk=event.pk)
        assert bytes(fresh.raw_body) == bytes(event.raw_body)
        assert fresh.body_purged_at is None

    # Each batch is an operator action naming its rows and the stamp they got.
    actions = list(OperatorAction.objects.order_by("pk"))
    assert [a.event_count for a in actions] == [4, 4, 4, 3]
    assert {a.action for a in actions} == {"purge_bodies"}
    assert {a.actor_name for a in actions} == {f"os:{getpass.getuser()}"}
    assert sorted(pk for a in actions for pk in a.event_ids) == sorted(metadata_before)
    for action in actions:
        stamps = set(
            InboxEvent.objects.filter(pk__in=action.event_ids).values_list(
                "body_purged_at", flat=True
            )
        )
        assert [purge_stamp(stamp) for stamp in stamps] == [action.details["purged_at"]]

    call_command("purge_inbox", "--older-than", "30")
    assert "of 0 terminal events" in capsys.readouterr().out
    assert OperatorAction.objects.count() == 4


def test_a_negative_age_is_refused():
    with pytest.raises(CommandError):
        call_command("purge_inbox", "--older-than", "-1")
