"""The sealer: every ledger row enters the verifiable log once, in the order it takes them,
whatever its id. Rows younger than the horizon wait, an attempt waits until it is closed, a
row whose transaction commits after higher ids were logged is logged by a later round, rows
written before the ticket column existed are taken by id, and logging writes nothing to the
rows (no new row version). ``audit_verify`` against rows changed or deleted behind the
application's back."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.utils import timezone

from audit.leaves import leaf_decode
from audit.ledgers import LEDGERS, scanned_ledgers
from audit.models import LogCursor, LogLeaf
from audit.sealer import ledger_rows_seal
from audit.verification import log_verify
from tests.webhooks.factories import (
    InboxAttemptFactory,
    InboxEventFactory,
    WebhookSourceFactory,
)
from trail.models import OperatorAction
from webhooks.models import InboxAttempt, InboxEvent
from webhooks.schemes import secret_fingerprint

from .ledger_rows import every_ledger, seal_all
from .tampering import sql, verify_fails

pytestmark = pytest.mark.django_db(transaction=True)


def old_events(n, **kwargs):
    return InboxEventFactory.create_batch(
        n, received_at=timezone.now() - timedelta(minutes=10), **kwargs
    )


def logged(kind: str) -> list[int]:
    return list(
        LogLeaf.objects.filter(kind=kind)
        .order_by("index")
        .values_list("record_id", flat=True)
    )


def leaf_of(kind: str, record_id: int) -> dict:
    return leaf_decode(LogLeaf.objects.get(kind=kind, record_id=record_id).leaf)


def test_rows_enter_the_log_in_order_and_rows_younger_than_the_horizon_wait(settings):
    settings.AUDIT_SEAL_BATCH_SIZE = 3
    events = old_events(7)
    young = InboxEventFactory()  # inside the horizon: not logged yet

    report = ledger_rows_seal()

    # The first round retires the (empty) HMAC chain: one entry, the log's first.
    assert report.appended == {"audit_chain_retired": 1, "inbox_event": 7}
    assert LogLeaf.objects.get(index=0).kind == "audit_chain_retired"
    assert logged("inbox_event") == [e.pk for e in events]
    assert ledger_rows_seal().appended == {}  # idempotent: nothing new is due
    assert ledger_rows_seal(now=timezone.now() + timedelta(minutes=5)).appended == {
        "inbox_event": 1
    }
    assert logged("inbox_event")[-1] == young.pk
    report = log_verify()
    assert report.ok, report.problems
    assert report.checked["inbox_event"] == 8


def test_every_ledger_enters_the_log_in_the_order_of_the_registry(settings):
    trail = every_ledger(settings)

    report = seal_all()

    kinds = [kind for kind, _ in LEDGERS.items() if LEDGERS[kind].scanned]
    order = list(LogLeaf.objects.order_by("index").values_list("kind", flat=True))
    assert order[0] == "audit_chain_retired"
    assert list(dict.fromkeys(order[1:])) == [k for k in kinds if k in order]
    assert set(report.appended) == {"audit_chain_retired", *kinds}
    event = leaf_of("inbox_event", trail.event.pk)
    secret = trail.source.secrets.order_by("pk").first()
    assert (event["secret_id"], event["secret_fingerprint"]) == (
        secret.pk,
        secret_fingerprint(secret.secret),
    )
    assert "raw_body" not in event and event["payload_hash"] == trail.event.payload_hash
    revision = leaf_of("document_revision", trail.revision.pk)
    assert (revision["inbox_event_id"], revision["event_id"]) == (
        trail.event.pk,
        trail.body["event_id"],
    )
    deployment = leaf_of("deployment", trail.deployment.pk)
    assert deployment["idempotency_key"] == "dep-1"
    assert "status" not in deployment  # state, not a record: its transitions are
    transitions = [
        (leaf["deployment_id"], leaf["from_status"], leaf["to_status"])
        for leaf in (
            leaf_decode(text)
            for text in LogLeaf.objects.filter(kind="job_transition")
            .order_by("index")
            .values_list("leaf", flat=True)
        )
    ]
    deployment = trail.deployment.pk
    assert transitions == [
        (deployment, "queued", "running"),
        (deployment, "running", "succeeded"),
        (deployment, "succeeded", "failed"),
        (None, "queued", "running"),  # the build, once its trigger was delivered
    ]
    [attempt] = [
        leaf_decode(text)
        for text in LogLeaf.objects.filter(kind="trigger_attempt").values_list(
            "leaf", flat=True
        )
    ]
    assert (attempt["build_id"], attempt["executor"], attempt["outcome"]) == (
        trail.build.pk,
        "http",
        "delivered",
    )
    # The API client's creation is an operator action too, then the rotation.
    actions = list(OperatorAction.objects.order_by("pk").values_list("action", "pk"))
    assert [action for action, _ in actions] == ["create_api_client", "rotate_secret"]
    assert logged("operator_action") == [pk for _, pk in actions]
    assert actions[-1][1] == trail.rotation.pk
    report = log_verify()
    assert report.ok, report.problems


def test_an_attempt_enters_the_log_once_it_is_closed():
    started = timezone.now() - timedelta(minutes=10)
    attempt = InboxAttemptFactory(
        event=old_events(1)[0],
        started_at=started,
        outcome=InboxAttempt.Outcome.STARTED,
        error="",
    )

    ledger_rows_seal()

    assert logged("inbox_attempt") == []
    # The cursor lists it as pending, or has not gone past it (it never passes a
    # transaction still running, anywhere on the server).
    cursor = LogCursor.objects.get(kind="inbox_attempt")
    attempt.refresh_from_db()
    assert cursor.pending == [attempt.pk] or (cursor.ticket, cursor.ticket_id) < (
        attempt.log_ticket,
        attempt.pk,
    )
    assert log_verify().ok  # an open attempt is not due
    InboxAttempt.objects.filter(pk=attempt.pk).update(
        finished_at=timezone.now(), outcome="succeeded", resulting_status="processed"
    )
    assert ledger_rows_seal().appended == {"inbox_attempt": 1}
    assert leaf_of("inbox_attempt", attempt.pk)["outcome"] == "succeeded"
    assert LogCursor.objects.get(kind="inbox_attempt").pending == []


def test_a_row_committed_after_higher_ids_were_logged_is_logged_later():
    """A row's place among its ledger's rows is the transaction that inserted it
    (``log_ticket``): the sealer takes every row it can see at once, but its cursor never
    passes a transaction still running, so the row committed last is found whatever its
    id."""
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
    higher = old_events(5, source=source)
    assert higher[0].pk > late_id[0]

    ledger_rows_seal()  # sees only the committed, higher ids
    assert logged("inbox_event") == [e.pk for e in higher]
    late_ticket = InboxEvent.objects.filter(pk__in=[e.pk for e in higher]).values_list(
        "log_ticket", flat=True
    )
    cursor = LogCursor.objects.get(kind="inbox_event")
    assert cursor.ticket <= min(late_ticket)  # not past the running transaction

    release.set()
    thread.join(timeout=30)
    assert ledger_rows_seal().appended == {"inbox_event": 1}
    assert logged("inbox_event")[-1] == late_id[0]
    assert log_verify().ok


def test_rows_written_before_the_ticket_column_are_taken_by_id():
    """Rows an upgraded deployment had before ``log_ticket`` existed carry none; they were
    all committed before the column was added, and the sealer takes them in id order."""
    events = old_events(4)
    sql(
        f"UPDATE {InboxEvent._meta.db_table} SET log_ticket = NULL WHERE id = ANY(%s)",  # noqa: S608
        [[e.pk for e in events[:3]]],
    )

    ledger_rows_seal()

    assert logged("inbox_event") == [e.pk for e in events]
    assert LogCursor.objects.get(kind="inbox_event").null_id == events[2].pk
    assert log_verify().ok


def _versions() -> dict[str, dict[int, int]]:
    """Each ledger row's current version: the transaction that wrote it (``xmin``)."""
    versions = {}
    for ledger in scanned_ledgers():
        table = ledger.model_class._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id, xmin::text::bigint FROM {table}")  # noqa: S608
            versions[ledger.kind] = dict(cursor.fetchall())
    return versions


def test_logging_writes_nothing_to_the_ledger_rows(settings):
    """No marker column is set: every ledger row keeps the version it had (no extra write,
    no extra row version for autovacuum to clean up), and the never-updated ones still carry
    the version their insert made."""
    every_ledger(settings)
    before = _versions()

    seal_all()

    assert LogLeaf.objects.count() > 10
    assert _versions() == before
    for kind in ("fingerprint_mismatch", "document_revision", "status_sync"):
        model = LEDGERS[kind].model_class
        for pk, ticket in model.objects.values_list("pk", "log_ticket"):
            assert before[kind][pk] == ticket % 2**32  # still the inserting transaction


def test_audit_verify_passes_on_an_untouched_log(capsys):
    old_events(4)
    ledger_rows_seal()
    call_command("audit_verify")
    out = capsys.readouterr().out
    assert "audit trail OK: log of 5 entries" in out
    assert "5 entries checked" in out


def test_audit_verify_names_a_row_altered_with_raw_sql(capsys):
    events = old_events(4)
    ledger_rows_seal()
    victim = events[2]
    sql(
        f"UPDATE {InboxEvent._meta.db_table} SET payload_hash = %s WHERE id = %s",  # noqa: S608
        ["f" * 64, victim.pk],
    )
    err = verify_fails(capsys)
    assert (
        f"ALTERED inbox event {victim.pk} (log index 3): fields changed since it was "
        "logged: payload_hash"
    ) in err
    assert err.count("ALTERED") == 1
    assert "DELETED" not in err


def test_audit_verify_names_a_row_whose_received_time_was_altered():
    events = old_events(2)
    ledger_rows_seal()
    sql(
        f"UPDATE {InboxEvent._meta.db_table} "  # noqa: S608
        "SET received_at = received_at + interval '1 second' WHERE id = %s",
        [events[0].pk],
    )
    [problem] = log_verify().problems
    assert problem.startswith(f"ALTERED inbox event {events[0].pk} (log index 1)")
    assert problem.endswith("received_at")


def test_audit_verify_names_a_deleted_row(capsys):
    events = old_events(3)
    ledger_rows_seal()
    sql("DELETE FROM webhooks_inboxattempt WHERE event_id = %s", [events[1].pk])
    sql(
        f"DELETE FROM {InboxEvent._meta.db_table} WHERE id = %s",  # noqa: S608
        [events[1].pk],
    )
    err = verify_fails(capsys)
    assert f"DELETED inbox event {events[1].pk} (log index 2)" in err
    assert "ALTERED" not in err


def test_processing_state_is_not_logged_it_changes_legitimately():
    events = old_events(2)
    ledger_rows_seal()
    InboxEvent.objects.filter(pk=events[0].pk).update(
        processing_status="processed", attempts=1, processed_at=timezone.now()
    )
    assert log_verify().ok


def test_audit_seal_task_is_in_the_beat_schedule():
    from config.celery_app import app

    entry = app.conf.beat_schedule["audit-seal"]
    assert entry["task"] == "audit.seal_inbox"
    from audit.tasks import seal_inbox_task

    old_events(2)
    assert seal_inbox_task.apply().get() == 3  # the chain's retirement and two rows
    from audit.models import LogCheckpoint

    assert LogCheckpoint.objects.get().tree_size == 3


def test_with_no_transaction_running_an_open_attempt_waits_in_the_pending_list(
    monkeypatch,
):
    """The cursor passes an open attempt only when no transaction below it is running (the
    server's ``xmin``): then the attempt waits in the cursor's pending list, and the round
    after it is closed takes it from there."""
    import audit.sealer

    monkeypatch.setattr(audit.sealer, "_xmin", lambda: 2**62)
    attempt = InboxAttemptFactory(
        event=old_events(1)[0],
        started_at=timezone.now() - timedelta(minutes=10),
        outcome=InboxAttempt.Outcome.STARTED,
    )
    later = InboxAttemptFactory(
        event=old_events(1)[0], started_at=timezone.now() - timedelta(minutes=9)
    )
    InboxAttempt.objects.filter(pk=later.pk).update(finished_at=timezone.now())

    ledger_rows_seal()

    assert logged("inbox_attempt") == [later.pk]
    cursor = LogCursor.objects.get(kind="inbox_attempt")
    assert cursor.pending == [attempt.pk]
    assert cursor.ticket_id == later.pk  # past both
    assert ledger_rows_seal().appended == {}
    InboxAttempt.objects.filter(pk=attempt.pk).update(finished_at=timezone.now())
    assert ledger_rows_seal().appended == {"inbox_attempt": 1}
    assert logged("inbox_attempt") == [later.pk, attempt.pk]
    assert LogCursor.objects.get(kind="inbox_attempt").pending == []


def test_the_cursor_never_passes_a_running_transaction(monkeypatch):
    """Rows above the oldest running transaction are logged at once, but the cursor stays
    below it: a row that transaction commits later, whatever its id, is still ahead."""
    import audit.sealer

    events = old_events(3)
    tickets = sorted(
        InboxEvent.objects.filter(pk__in=[e.pk for e in events]).values_list(
            "log_ticket", flat=True
        )
    )
    monkeypatch.setattr(audit.sealer, "_xmin", lambda: tickets[1])

    ledger_rows_seal()

    assert logged("inbox_event") == [e.pk for e in events]
    cursor = LogCursor.objects.get(kind="inbox_event")
    assert (cursor.ticket, cursor.ticket_id) == (tickets[1], 0)
    assert (
        ledger_rows_seal().appended == {}
    )  # the rows above are passed over, not again


def test_a_purge_enters_the_log_with_the_bodies_it_drops(monkeypatch):
    """In the purge's own transaction, with no sealing round: a body is gone only once the
    log holds who purged it; if the log cannot take it, nothing is purged."""
    events = old_events(3, processing_status="processed")
    InboxEvent.objects.update(received_at=timezone.now() - timedelta(days=40))
    import audit.sealer

    def refused(**kwargs):
        raise RuntimeError("the log is unavailable")

    monkeypatch.setattr(audit.sealer, "log_append", refused)
    with pytest.raises(RuntimeError):
        call_command("purge_inbox", "--older-than", "30")
    assert not InboxEvent.objects.filter(raw_body__isnull=True).exists()
    monkeypatch.undo()

    call_command("purge_inbox", "--older-than", "30")

    assert sorted(logged("body_purge")) == sorted(e.pk for e in events)
    purge = leaf_of("body_purge", events[0].pk)
    action = InboxEvent.objects.get(pk=events[0].pk)
    from webhooks.retention import purge_stamp

    assert purge["purged_at"] == purge_stamp(action.body_purged_at)
    assert logged("inbox_event") == []  # the rows themselves wait for the sealer


@pytest.mark.parametrize(
    "stored", ["0001-06-01 00:00:00+00 BC", "10000-01-01 00:00:00+00", "infinity"]
)
def test_a_row_whose_date_python_cannot_hold_is_logged_all_the_same(stored):
    """Older deployments stored such dates (docs/security.md, "Values the database
    refuses"): the sealer formats instants in the database, so such a row neither stops
    sealing nor verifies wrongly."""
    event = old_events(1)[0]
    sql(
        f"UPDATE {InboxEvent._meta.db_table} SET occurred_at = %s WHERE id = %s",  # noqa: S608
        [stored, event.pk],
    )
    later = old_events(1)[0]

    ledger_rows_seal()

    assert logged("inbox_event") == [event.pk, later.pk]
    occurred = leaf_of("inbox_event", event.pk)["occurred_at"]
    assert (
        occurred
        == {
            "0001-06-01 00:00:00+00 BC": "0001-06-01T00:00:00.000000+00:00 BC",
            "10000-01-01 00:00:00+00": "10000-01-01T00:00:00.000000+00:00",
            "infinity": "infinity",
        }[stored]
    )
    assert log_verify().ok


def test_a_round_stops_starting_batches_at_its_time_budget_the_next_goes_on(settings):
    """A round ends well inside the task's time limits (half its soft limit by default), so
    that it reaches its checkpoint even with a backlog: the next round goes on."""
    settings.AUDIT_SEAL_BATCH_SIZE = 2
    events = old_events(5)
    assert ledger_rows_seal(max_seconds=0).appended == {"audit_chain_retired": 1}
    # Three batches: the rows without a ticket (none), then two of two rows.
    assert ledger_rows_seal(max_batches=3).appended == {"inbox_event": 4}
    assert ledger_rows_seal().appended == {"inbox_event": 1}
    assert logged("inbox_event") == [e.pk for e in events]
