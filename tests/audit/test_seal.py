"""The sealed audit trail: sealing in id order into a hash chain, rows that commit late, and
``audit_verify`` against rows changed or deleted behind the application's back."""

import threading
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction
from django.utils import timezone

from audit.models import AuditSeal, AuditSealEntry
from audit.services import GENESIS_HASH, audit_trail_verify, inbox_rows_seal
from tests.webhooks.factories import InboxEventFactory, WebhookSourceFactory
from webhooks.models import InboxEvent

pytestmark = pytest.mark.django_db(transaction=True)


def old_events(n, **kwargs):
    return InboxEventFactory.create_batch(
        n, received_at=timezone.now() - timedelta(minutes=10), **kwargs
    )


def test_seals_chain_in_id_order_and_skip_rows_younger_than_the_horizon(settings):
    settings.AUDIT_SEAL_BATCH_SIZE = 3
    events = old_events(7)
    young = InboxEventFactory()  # inside the horizon: not sealed yet

    seals = inbox_rows_seal()

    assert [s.row_count for s in seals] == [3, 3, 1]
    assert seals[0].previous_hash == GENESIS_HASH
    assert seals[1].previous_hash == seals[0].seal_hash
    assert seals[2].previous_hash == seals[1].seal_hash
    sealed = list(
        AuditSealEntry.objects.order_by("seal__sequence", "inbox_event_id").values_list(
            "inbox_event_id", flat=True
        )
    )
    assert sealed == sorted(e.pk for e in events)
    assert not AuditSealEntry.objects.filter(inbox_event_id=young.pk).exists()
    assert inbox_rows_seal() == []  # idempotent: nothing new to seal

    report = audit_trail_verify()
    assert report.ok
    assert (report.seals_checked, report.rows_checked) == (3, 7)


def test_a_row_committed_after_a_higher_id_was_sealed_is_sealed_later():
    source = WebhookSourceFactory()
    inserted, release = threading.Event(), threading.Event()
    late_id = []

    def slow_transaction():
        try:
            with transaction.atomic():
                event = InboxEventFactory(
                    source=source, received_at=timezone.now() - timedelta(minutes=10)
                )
                late_id.append(event.pk)
                inserted.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow_transaction)
    thread.start()
    assert inserted.wait(timeout=30)
    higher = old_events(1, source=source)[0]
    assert higher.pk > late_id[0]

    first = inbox_rows_seal()  # sees only the committed, higher id
    assert [s.row_count for s in first] == [1]
    assert AuditSealEntry.objects.get().inbox_event_id == higher.pk

    release.set()
    thread.join(timeout=30)
    second = inbox_rows_seal()

    assert [s.row_count for s in second] == [1]
    assert AuditSealEntry.objects.get(seal=second[0]).inbox_event_id == late_id[0]
    assert second[0].previous_hash == first[0].seal_hash
    assert audit_trail_verify().ok


def test_audit_verify_passes_on_an_untouched_trail(capsys):
    old_events(4)
    inbox_rows_seal()
    call_command("audit_verify")
    assert "audit trail OK: 1 seals, 4 sealed rows checked" in capsys.readouterr().out


def test_audit_verify_names_a_row_altered_with_raw_sql(capsys):
    events = old_events(4)
    inbox_rows_seal()
    victim = events[2]
    table = InboxEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET payload_hash = %s WHERE id = %s",  # noqa: S608
            ["f" * 64, victim.pk],
        )
    with pytest.raises(CommandError, match="FAILED"):
        call_command("audit_verify")
    err = capsys.readouterr().err
    assert f"ALTERED inbox event {victim.pk}" in err
    assert err.count("ALTERED") == 1
    assert "DELETED" not in err


def test_audit_verify_names_a_row_whose_received_time_was_altered(capsys):
    events = old_events(2)
    inbox_rows_seal()
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {InboxEvent._meta.db_table} "  # noqa: S608
            "SET received_at = received_at + interval '1 second' WHERE id = %s",
            [events[0].pk],
        )
    report = audit_trail_verify()
    assert report.altered_rows == [events[0].pk]


def test_audit_verify_names_a_deleted_row(capsys):
    events = old_events(3)
    inbox_rows_seal()
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM webhooks_inboxattempt WHERE event_id = %s", [events[1].pk]
        )
        cursor.execute(
            f"DELETE FROM {InboxEvent._meta.db_table} WHERE id = %s",  # noqa: S608
            [events[1].pk],
        )
    with pytest.raises(CommandError):
        call_command("audit_verify")
    err = capsys.readouterr().err
    assert f"DELETED inbox event {events[1].pk}" in err
    assert "ALTERED" not in err


def test_audit_verify_detects_a_tampered_seal_chain():
    old_events(2)
    inbox_rows_seal()
    old_events(2)
    inbox_rows_seal()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE audit_auditsealentry SET row_digest = %s WHERE id = "
            "(SELECT min(id) FROM audit_auditsealentry)",
            ["0" * 64],
        )
    report = audit_trail_verify()
    assert not report.ok
    assert report.broken_seals and report.broken_seals[0].startswith("seal #1:")


def test_status_changes_do_not_break_the_seal():
    events = old_events(2)
    inbox_rows_seal()
    InboxEvent.objects.filter(pk=events[0].pk).update(
        processing_status="processed", attempts=1, processed_at=timezone.now()
    )
    assert audit_trail_verify().ok


def test_audit_seal_task_is_in_the_beat_schedule():
    from config.celery_app import app

    entry = app.conf.beat_schedule["audit-seal"]
    assert entry["task"] == "audit.seal_inbox"
    from audit.tasks import seal_inbox_task

    old_events(2)
    assert seal_inbox_task.apply().get() == 1
    assert AuditSeal.objects.count() == 1
