"""The retired HMAC chain keeps proving the period it covers: what an attacker with database
access changes behind the application's back among the rows it sealed, and how
``audit_verify`` names it: sealed fields and bodies of inbox rows, purges that are not purges,
operator actions, the chain itself (keyed, with a head kept elsewhere, and its head recorded
by the log when the log took it in), and the ORM's refusal to bulk-change ledgers. Every edit
here is raw SQL, as such an attacker would make it.

Each chain here is made as the retired sealer made it (``tests.audit.hmac_chain``), then taken
into the log by the log's first sealing round, as an upgraded deployment's is: a sealed row
changed since is named twice, by the chain (a line ending "(HMAC chain)") and by the log."""

import hashlib
from datetime import UTC, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.models import AuditSeal, AuditSealEntry
from audit.sealer import ledger_rows_seal
from audit.services import audit_trail_verify
from tests.snapshots import rows_snapshot
from tests.webhooks.factories import InboxEventFactory, WebhookSourceFactory
from trail.models import OperatorAction
from webhooks.models import InboxEvent

from .hmac_chain import hmac_seal
from .tampering import sql, verify_fails

pytestmark = pytest.mark.django_db(transaction=True)

INBOX = InboxEvent._meta.db_table
ACTIONS = OperatorAction._meta.db_table


def old_events(n, **kwargs):
    kwargs.setdefault("received_at", timezone.now() - timedelta(minutes=10))
    return InboxEventFactory.create_batch(n, **kwargs)


def chain_extend():
    """Seals every row and operator action there is into the chain, as the retired sealer
    did (the horizon moved past them)."""
    return hmac_seal(now=timezone.now() + timedelta(minutes=5))


def chain_retire():
    """The log's sealing round: takes the chain (and every row) into the log."""
    return ledger_rows_seal(now=timezone.now() + timedelta(minutes=5))


def seal_everything():
    seals = chain_extend()
    chain_retire()
    return seals


def sealed(make):
    """``make()``, then every row it made sealed into the chain and the chain into the log:
    made by the first test of a process with the same ``make``, copied back for the others
    (tests/snapshots.py)."""

    def build():
        made = make()
        seal_everything()
        return made

    return rows_snapshot(f"{make.__qualname__} sealed", build)


def two_old_events():
    return old_events(2)


def two_processed_events():
    return old_events(2, processing_status="processed")


def three_events_and_another_source():
    return old_events(3), WebhookSourceFactory()


def three_operator_actions():
    return operator_actions(3)


# --- Sealed fields and bodies of inbox rows ---------------------------------------------------

SEALED_FIELD_EDITS = {
    "event_id": "event_id = event_id || '-x'",
    "source": "source_id = %(other_source)s",
    "event_type": "event_type = 'research.document.deleted'",
    "entity_id": "entity_id = 'doc-somebody-else'",
    "entity_type": "entity_type = 'invoice'",
    "source_version": "source_version = COALESCE(source_version, 0) + 1",
    "occurred_at": "occurred_at = occurred_at - interval '1 day'",
    "tenant_id": "tenant_id = 'tenant-b'",
    "idempotency_key": "idempotency_key = 'key-b'",
    "content_fingerprint": "content_fingerprint = repeat('e', 64)",
    "headers": """headers = headers || '{"X-Forwarded-For": "10.0.0.1"}'::jsonb""",
    "signature_valid": "signature_valid = NOT signature_valid",
    "remote_addr": "remote_addr = '198.51.100.7'",
}


@pytest.mark.parametrize("field", sorted(SEALED_FIELD_EDITS))
def test_audit_verify_names_a_row_whose_sealed_field_was_changed(capsys, field):
    events, other_source = sealed(three_events_and_another_source)
    victim = events[1]
    sql(
        f"UPDATE {INBOX} SET {SEALED_FIELD_EDITS[field]} WHERE id = %(id)s",  # noqa: S608
        {"id": victim.pk, "other_source": other_source.pk},
    )

    err = verify_fails(capsys)

    assert f"ALTERED inbox event {victim.pk}: sealed fields changed (HMAC chain)" in err
    assert f"ALTERED inbox event {victim.pk} (log index" in err
    assert err.count("ALTERED") == 2  # by the chain and by the log
    assert "BROKEN" not in err


def test_processing_state_is_not_sealed_it_changes_legitimately():
    events = sealed(two_old_events)
    sql(
        f"UPDATE {INBOX} SET processing_status = 'dead_lettered', attempts = 8,"  # noqa: S608
        " error_message = 'boom', processed_at = now(), next_attempt_at = now(),"
        " lease_expires_at = now(), dispatched_at = now(),"
        " delivery_count = delivery_count + 3, last_seen_at = now() WHERE id = %s",
        [events[0].pk],
    )
    assert audit_trail_verify().ok


@pytest.mark.parametrize("size", [100, 100_000], ids=["small", "large"])
def test_audit_verify_names_a_row_whose_body_was_changed(capsys, size):
    """Small bodies are read with their row, large ones in groups of their own."""
    events = old_events(3)
    large = b'{"padding": "' + b"x" * size + b'"}'
    sql(
        f"UPDATE {INBOX} SET raw_body = %s, payload_hash = %s"  # noqa: S608
        " WHERE id = ANY(%s)",
        [large, hashlib.sha256(large).hexdigest(), [e.pk for e in events]],
    )
    seal_everything()
    assert audit_trail_verify().ok
    victim = events[0]
    sql(
        f"UPDATE {INBOX} SET raw_body = %s WHERE id = %s",  # noqa: S608
        [large.replace(b"xxx", b"yyy", 1), victim.pk],
    )

    err = verify_fails(capsys)

    assert (
        f"ALTERED inbox event {victim.pk}: body does not match its payload hash" in err
    )
    assert err.count("body does not match its payload hash") == 2
    assert err.count("ALTERED") == 2


def test_a_changed_body_with_a_matching_payload_hash_is_named(capsys):
    events = sealed(two_old_events)
    forged = b'{"event_id": "forged"}'
    sql(
        f"UPDATE {INBOX} SET raw_body = %s, payload_hash = %s WHERE id = %s",  # noqa: S608
        [forged, hashlib.sha256(forged).hexdigest(), events[1].pk],
    )
    assert f"ALTERED inbox event {events[1].pk}" in verify_fails(capsys)


def test_purged_bodies_verify(capsys):
    events = old_events(3, processing_status="processed")
    seal_everything()
    call_command("purge_inbox", "--older-than", "0")
    assert InboxEvent.objects.filter(raw_body__isnull=True).count() == 3

    call_command("audit_verify")
    assert "audit trail OK" in capsys.readouterr().out
    assert all(
        e.body_purged_at
        for e in InboxEvent.objects.filter(pk__in=[e.pk for e in events])
    )


def test_a_row_marked_purged_whose_body_is_still_there_is_still_checked(capsys):
    events = sealed(two_processed_events)
    sql(
        f"UPDATE {INBOX} SET raw_body = convert_to('{{}}', 'UTF8'),"  # noqa: S608
        " body_purged_at = now() WHERE id = %s",
        [events[0].pk],
    )
    assert f"ALTERED inbox event {events[0].pk}" in verify_fails(capsys)


@pytest.mark.parametrize("stamp", ["NULL", "now()"])
def test_a_body_dropped_outside_purge_inbox_is_named(capsys, stamp):
    events = sealed(two_processed_events)
    sql(
        f"UPDATE {INBOX} SET raw_body = NULL, body_purged_at = {stamp}"  # noqa: S608
        " WHERE id = %s",
        [events[1].pk],
    )
    err = verify_fails(capsys)
    assert f"ALTERED inbox event {events[1].pk}" in err
    assert "purge" in err


def test_a_fake_purge_that_copies_a_real_purge_is_named(capsys):
    """The attacker copies the stamp of a real purge onto a row that purge did not take: a
    row received after its cutoff."""
    purged = old_events(2, processing_status="processed")
    recent = old_events(
        1,
        processing_status="processed",
        received_at=timezone.now() - timedelta(minutes=2),
    )[0]
    for event in purged:
        sql(
            f"UPDATE {INBOX} SET received_at = received_at - interval '40 days'"  # noqa: S608
            " WHERE id = %s",
            [event.pk],
        )
    seal_everything()
    call_command("purge_inbox", "--older-than", "30")
    assert audit_trail_verify().ok
    sql(
        f"UPDATE {INBOX} SET raw_body = NULL, body_purged_at ="  # noqa: S608
        f" (SELECT body_purged_at FROM {INBOX} WHERE id = %s) WHERE id = %s",
        [purged[0].pk, recent.pk],
    )
    err = verify_fails(capsys)
    assert f"ALTERED inbox event {recent.pk}" in err
    assert err.count("body missing outside any logged purge") == 2
    assert err.count("ALTERED") == 2


# --- Operator actions are part of the sealed trail --------------------------------------------


def operator_actions(n):
    return [
        OperatorAction.objects.create(
            action="replay", actor_name="operator", reason=f"reason {i}", event_ids=[i]
        )
        for i in range(n)
    ]


def test_audit_verify_names_an_altered_operator_action(capsys):
    actions = sealed(three_operator_actions)
    sql(
        f"UPDATE {ACTIONS} SET actor_name = 'somebody-else' WHERE id = %s",  # noqa: S608
        [actions[1].pk],
    )
    err = verify_fails(capsys)
    assert f"ALTERED operator action {actions[1].pk} (HMAC chain)" in err
    assert f"ALTERED operator action {actions[1].pk} (log index" in err
    assert err.count("ALTERED") == 2


def test_audit_verify_names_a_deleted_operator_action(capsys):
    actions = sealed(three_operator_actions)
    sql(f"DELETE FROM {ACTIONS} WHERE id = %s", [actions[2].pk])  # noqa: S608
    err = verify_fails(capsys)
    assert f"DELETED operator action {actions[2].pk} (HMAC chain)" in err
    assert f"DELETED operator action {actions[2].pk} (log index" in err
    assert "ALTERED" not in err


def test_operator_actions_are_sealed_with_the_rows_and_verify(capsys):
    old_events(2)
    operator_actions(2)
    seal_everything()
    call_command("audit_verify")
    out = capsys.readouterr().out
    assert "audit trail OK" in out
    assert "2 operator actions" in out


# --- The chain: keyed, with a head kept elsewhere ---------------------------------------------


def legacy_digest(pk, payload_hash, received_at):
    received = received_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return hashlib.sha256(f"{pk}|{payload_hash}|{received}".encode()).hexdigest()


def test_a_chain_recomputed_with_the_published_unkeyed_formula_is_caught():
    """Without a key, anyone who reads the code can recompute every digest of a chain."""
    events = sealed(two_old_events)
    victim = events[0]
    sql(
        f"UPDATE {INBOX} SET payload_hash = %s WHERE id = %s",  # noqa: S608
        ["f" * 64, victim.pk],
    )
    victim.refresh_from_db()
    seal = AuditSeal.objects.get()
    digests = dict(AuditSealEntry.objects.values_list("inbox_event_id", "row_digest"))
    digests[victim.pk] = legacy_digest(
        victim.pk, victim.payload_hash, victim.received_at
    )
    rows_hash = hashlib.sha256(
        "\n".join(digests[pk] for pk in sorted(digests)).encode()
    ).hexdigest()
    seal_hash = hashlib.sha256(
        f"{seal.previous_hash}|{rows_hash}|{seal.sequence}|{seal.row_count}".encode()
    ).hexdigest()
    sql(
        "UPDATE audit_auditsealentry SET row_digest = %s WHERE inbox_event_id = %s",
        [digests[victim.pk], victim.pk],
    )
    sql(
        "UPDATE audit_auditseal SET rows_hash = %s, seal_hash = %s WHERE id = %s",
        [rows_hash, seal_hash, seal.pk],
    )

    report = audit_trail_verify()

    assert not report.ok
    assert report.broken_seals or report.altered_rows


def test_a_chain_forged_with_the_code_but_without_the_key_is_caught(settings):
    from audit import services

    events = sealed(two_old_events)
    victim = events[1]
    sql(
        f"UPDATE {INBOX} SET event_type = 'forged' WHERE id = %s",  # noqa: S608
        [victim.pk],
    )
    real_key = settings.AUDIT_SEAL_KEY
    settings.AUDIT_SEAL_KEY = "a-guess-of-the-attacker-0123456789abcdef"
    seal = AuditSeal.objects.get()
    digests = services.inbox_row_digests(
        version=seal.version, pks=sorted(e.pk for e in events)
    )
    rows_hash = services.rows_hash_compute([digests[pk] for pk in sorted(digests)])
    sql(
        "UPDATE audit_auditsealentry SET row_digest = %s WHERE inbox_event_id = %s",
        [digests[victim.pk], victim.pk],
    )
    sql("UPDATE audit_auditseal SET rows_hash = %s WHERE id = %s", [rows_hash, seal.pk])
    seal.refresh_from_db()
    sql(
        "UPDATE audit_auditseal SET seal_hash = %s WHERE id = %s",
        [services.seal_hash_compute(seal), seal.pk],
    )
    assert services.audit_trail_verify().ok  # under the guessed key it looks fine
    settings.AUDIT_SEAL_KEY = real_key

    report = services.audit_trail_verify()

    assert not report.ok
    assert report.broken_seals[0].startswith(f"seal #{seal.sequence}:")


def test_the_seal_key_is_needed_to_verify(settings):
    sealed(two_old_events)
    assert audit_trail_verify().ok
    settings.AUDIT_SEAL_KEY = "another-key-0123456789abcdef0123456789"
    assert len(audit_trail_verify().broken_seals) == 1


def test_downgrading_a_seal_to_the_legacy_version_is_caught():
    sealed(two_old_events)
    sql("UPDATE audit_auditseal SET version = 1")
    report = audit_trail_verify()
    assert not report.ok


def head_of(out):
    line = next(line for line in out.splitlines() if line.startswith("head: "))
    return line.removeprefix("head: ").strip()


def test_audit_verify_prints_the_head_and_checks_a_head_given_to_it(capsys):
    old_events(2)
    chain_extend()
    old_events(2)
    seal_everything()
    last = AuditSeal.objects.order_by("-sequence").first()

    call_command("audit_verify")
    head = head_of(capsys.readouterr().out)
    assert head == f"{last.sequence}:{last.seal_hash}"

    call_command("audit_verify", "--expect-head", head)
    assert "audit trail OK" in capsys.readouterr().out
    # An older head kept earlier is still a prefix of the chain.
    first = AuditSeal.objects.get(sequence=1)
    call_command("audit_verify", "--expect-head", f"1:{first.seal_hash}")
    with pytest.raises(CommandError):
        call_command("audit_verify", "--expect-head", "not-a-head")


def test_a_truncated_chain_is_caught_against_the_kept_head_and_by_the_log(capsys):
    old_events(2)
    chain_extend()
    events = old_events(2)
    seal_everything()
    call_command("audit_verify")
    head = head_of(capsys.readouterr().out)
    last = AuditSeal.objects.order_by("-sequence").first()
    # The attacker alters a row of the last seal and removes that seal and its entries...
    sql(
        f"UPDATE {INBOX} SET event_type = 'forged' WHERE id = %s",  # noqa: S608
        [events[0].pk],
    )
    sql("DELETE FROM audit_auditsealentry WHERE seal_id = %s", [last.pk])
    sql("DELETE FROM audit_auditseal WHERE id = %s", [last.pk])

    assert audit_trail_verify().ok  # the shorter chain is consistent in itself
    err = verify_fails(capsys, "--expect-head", head)
    assert "TRUNCATED" in err
    # ... which the log names without a head kept elsewhere: it recorded the chain's head
    # when it took the chain in, and it holds the altered row as it was.
    err = verify_fails(capsys)
    assert "ALTERED the retired HMAC chain (log index" in err
    assert f"it ends at seal #{last.sequence - 1} (" in err
    assert f"the log recorded #{last.sequence} (" in err
    assert f"DELETED HMAC seal {last.pk} (log index" in err
    assert f"ALTERED inbox event {events[0].pk} (log index" in err
    assert "fields changed since it was logged: event_type" in err

    # No sealing round seals the altered row again: the chain is retired.
    chain_retire()
    assert AuditSeal.objects.count() == last.sequence - 1


# --- Ledgers refuse bulk changes through the ORM ----------------------------------------------


def test_bulk_update_and_delete_of_ledger_rows_are_refused():
    from core.models import AppendOnlyError

    actions = operator_actions(2)
    old_events(2)
    seal_everything()
    seal = AuditSeal.objects.get()
    querysets = [
        OperatorAction.objects.all(),
        OperatorAction.objects.filter(pk=actions[0].pk),
        AuditSeal.objects.all(),
        AuditSealEntry.objects.filter(seal=seal),
        seal.entries.all(),
    ]
    from audit.models import AuditSealActionEntry

    querysets.append(AuditSealActionEntry.objects.all())
    for queryset in querysets:
        with pytest.raises(AppendOnlyError):
            queryset.update(id=0)
        with pytest.raises(AppendOnlyError):
            queryset.delete()
    actions[0].reason = "rewritten"
    with pytest.raises(AppendOnlyError):
        OperatorAction.objects.bulk_update([actions[0]], ["reason"])
    assert OperatorAction.objects.filter(reason="rewritten").count() == 0
    assert AuditSealEntry.objects.count() == 2
    assert audit_trail_verify().ok
