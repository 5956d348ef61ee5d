"""The four attacks on the sealed trail found by its second review, as someone with write
access to the database but none of the keys would run them (raw SQL), each now named by
``audit_verify`` or by the log's consistency with a checkpoint kept outside the database
(docs/security.md, "The attacks, and what names them"):

1. a forged ``purge_bodies`` operator action excusing a body deleted by hand;
2. rows inserted below the sealed floor (into an id gap), with an old time;
3. ledgers the chain did not cover rewritten: mismatch evidence deleted, a deployment's status
   set, its transitions and status syncs deleted, a revision changed;
4. the newest entries cut off and sealed again.

Only the product's entry points are used (the beat task, ``audit_verify``, ``purge_inbox``,
the public checkpoint endpoint), so that each test means the same against the trail as it was
before the log: there, every one of them passes unnoticed."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from audit.tasks import seal_inbox_task
from tests.webhooks.factories import InboxEventFactory
from trail.models import OperatorAction
from webhooks.models import InboxEvent
from webhooks.retention import purge_stamp

from .ledger_rows import every_ledger
from .tampering import sql, verify_fails

pytestmark = pytest.mark.django_db(transaction=True)

INBOX = InboxEvent._meta.db_table
ACTIONS = OperatorAction._meta.db_table


@pytest.fixture(autouse=True)
def due_at_once(settings):
    """Every row is due as soon as it is written (no horizon to wait for)."""
    settings.AUDIT_SEAL_HORIZON_SECONDS = 0
    settings.AUDIT_SEAL_INTERVAL_SECONDS = 0


def test_1_a_forged_purge_does_not_excuse_a_body_deleted_by_hand(capsys):
    purged = InboxEventFactory(
        processing_status="processed", received_at=timezone.now() - timedelta(days=40)
    )
    victim = InboxEventFactory(
        processing_status="processed", received_at=timezone.now() - timedelta(days=10)
    )
    seal_inbox_task()
    call_command("purge_inbox", "--older-than", "30")  # a real purge: the first only

    # The attacker drops the victim's body by hand, and writes a purge_bodies action of
    # their own that names it with its stamp.
    sql(
        f"UPDATE {INBOX} SET raw_body = NULL, body_purged_at = now() WHERE id = %s",  # noqa: S608
        [victim.pk],
    )
    stamp = InboxEvent.objects.get(pk=victim.pk).body_purged_at
    sql(
        f"INSERT INTO {ACTIONS} (action, actor_name, reason, event_ids, event_count,"  # noqa: S608
        " skipped_count, details, created_at) VALUES ('purge_bodies', 'retention', '',"
        " %s, 1, 0, %s, now())",
        [
            json.dumps([victim.pk]),
            json.dumps({"purged_at": purge_stamp(stamp), "older_than": "x"}),
        ],
    )
    seal_inbox_task()  # even once the forged action is sealed like any other

    err = verify_fails(capsys)

    assert (
        f"ALTERED inbox event {victim.pk} (log index" in err
        and "body missing outside any logged purge" in err
    )
    assert f"inbox event {purged.pk} " not in err  # a real purge is in the log


def test_2_a_row_inserted_below_the_sealed_floor_is_named(capsys):
    days_ago = timezone.now() - timedelta(days=3)
    first = InboxEventFactory(received_at=days_ago)
    with transaction.atomic():  # an id taken and given back: a gap below later rows
        gap = InboxEventFactory(received_at=days_ago).pk
        transaction.set_rollback(True)
    InboxEventFactory(received_at=days_ago + timedelta(hours=1))
    InboxEventFactory.create_batch(3, received_at=timezone.now() - timedelta(minutes=5))
    seal_inbox_task()
    # Time passes: the seals made then are older than any sealer's lookback.
    sql("UPDATE audit_auditseal SET created_at = created_at - interval '2 days'")
    call_command("audit_verify")
    capsys.readouterr()

    # The attacker slips a row into the gap, dated back among the oldest rows.
    columns = (
        "source_id, event_type, entity_id, entity_type, tenant_id, idempotency_key,"
        " payload_hash, content_fingerprint, raw_body, headers, signature_valid,"
        " received_at, processing_status, http_status, error_message, attempts,"
        " delivery_count, last_seen_at"
    )
    sql(
        f"INSERT INTO {INBOX} (id, event_id, {columns}) SELECT %s, 'evt-backdated',"  # noqa: S608
        f" {columns} FROM {INBOX} WHERE id = %s",
        [gap, first.pk],
    )
    err = verify_fails(capsys)  # before any sealing round: not in the log
    assert f"NOT LOGGED inbox event {gap}" in err

    seal_inbox_task()  # taken in, whatever its id: and named for when it claims to be
    err = verify_fails(capsys)
    assert f"LATE inbox event {gap}" in err
    assert "logged more than AUDIT_SEAL_LOOKBACK_SECONDS after it claims" in err


def test_3_ledgers_beyond_the_inbox_cannot_be_rewritten_unnoticed(settings, capsys):
    trail = every_ledger(settings)
    seal_inbox_task()
    call_command("audit_verify")
    capsys.readouterr()
    mismatch = trail.event.mismatches.get()
    transitions = list(trail.deployment.transitions.values_list("pk", flat=True))
    sync = trail.deployment.status_syncs.get()

    sql("DELETE FROM webhooks_fingerprintmismatch")
    sql("UPDATE deployments_job SET status = 'succeeded'")
    sql("DELETE FROM deployments_jobtransition")
    sql("DELETE FROM deployments_statussync")
    sql("UPDATE research_documentrevision SET content_hash = 'sha256:forged'")

    err = verify_fails(capsys)

    assert f"DELETED fingerprint mismatch {mismatch.pk}" in err
    for pk in transitions:
        assert f"DELETED job transition {pk}" in err
    assert f"DELETED status sync {sync.pk}" in err
    assert (
        f"ALTERED document revision {trail.revision.pk} (log index" in err
        and "fields changed since it was logged: content_hash" in err
    )
    assert (
        f"UNEXPLAINED deployment {trail.deployment.public_id}: its status is "
        "succeeded, but its transitions end at queued (it has none" in err
    )


def test_3_a_status_no_transition_explains_is_named(settings, capsys):
    trail = every_ledger(settings)
    seal_inbox_task()
    sql(
        "UPDATE deployments_job SET status = 'succeeded' WHERE id = %s",
        [trail.deployment.pk],
    )
    err = verify_fails(capsys)
    assert (
        f"UNEXPLAINED deployment {trail.deployment.public_id}: its status is "
        "succeeded, but its transitions end at failed"
    ) in err


def test_4_cutting_off_the_newest_entries_and_sealing_again_fails_the_kept_checkpoint(
    capsys, tmp_path
):
    InboxEventFactory.create_batch(2, received_at=timezone.now() - timedelta(hours=1))
    seal_inbox_task()
    events = InboxEventFactory.create_batch(
        2, received_at=timezone.now() - timedelta(minutes=30)
    )
    seal_inbox_task()
    kept = tmp_path / "checkpoint"
    kept.write_bytes(Client().get("/audit/checkpoint").content)  # an auditor's copy
    call_command("audit_verify", "--since", str(kept))
    assert "audit trail OK" in capsys.readouterr().out

    # The attacker changes a row, cuts the newest entries off (and the checkpoints and
    # the sealer's position that cover them), and lets the sealer take the rows in again.
    sql(
        f"UPDATE {INBOX} SET event_type = 'forged' WHERE id = %s",  # noqa: S608
        [events[-1].pk],
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT min(index) FROM audit_logleaf WHERE kind = 'inbox_event'"
            " AND record_id = ANY(%s)",
            [[e.pk for e in events]],
        )
        cut = cursor.fetchone()[0]
    from audit.merkle import stored_hash_count

    sql("DELETE FROM audit_logleaf WHERE index >= %s", [cut])
    sql("DELETE FROM audit_lognode WHERE position >= %s", [stored_hash_count(cut)])
    sql("DELETE FROM audit_logcheckpointdelivery")
    sql("DELETE FROM audit_logcheckpoint WHERE tree_size > %s", [cut])
    sql("DELETE FROM audit_logcursor")
    seal_inbox_task()
    call_command(
        "audit_verify"
    )  # consistent in itself, and with what the database holds
    assert "audit trail OK" in capsys.readouterr().out

    err = verify_fails(capsys, "--since", str(kept))

    assert "REWRITTEN the log does not extend the kept checkpoint" in err
