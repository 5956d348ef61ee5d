"""``audit_verify`` over the verifiable log: every ledger's entries against its rows (fields,
bodies, purges), the rows due that are not in the log, the tree against its signed
checkpoints and against checkpoints kept outside the database. Every edit is raw SQL, as an
attacker with database access would make it."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from audit.checkpoints import checkpoint_make
from audit.ledgers import LEDGERS
from audit.models import LogLeaf
from audit.note import checkpoint_text, key_generate, note_sign, signer_parse
from audit.verification import KeptCheckpoint, log_verify
from tests.webhooks.factories import InboxEventFactory
from webhooks.models import FingerprintMismatch, InboxEvent

from .ledger_rows import seal_all, sealed_trail
from .tampering import sql, verify_fails

pytestmark = pytest.mark.django_db(transaction=True)


# The databases on which the sealed trail was verified untouched. Every test gets the same
# rows back (tests/snapshots.py), copied into emptied tables: verified once per process.
_VERIFIED: set[str] = set()


@pytest.fixture
def trail(settings):
    trail = sealed_trail(settings)
    if connection.settings_dict["NAME"] not in _VERIFIED:
        report = log_verify()
        assert report.ok, report.problems
        _VERIFIED.add(connection.settings_dict["NAME"])
    return trail


def table(kind: str) -> str:
    return LEDGERS[kind].model_class._meta.db_table


# A field of each ledger an attacker might rewrite, and the row it is in.
EDITS = {
    "inbox_event": ("event_type = 'forged'", lambda t: t.event.pk),
    "fingerprint_mismatch": (
        "remote_addr = '198.51.100.7'",
        lambda t: t.event.mismatches.get().pk,
    ),
    "inbox_attempt": (
        "outcome = 'dead_lettered'",
        lambda t: t.event.attempt_log.get().pk,
    ),
    "document_revision": ("event_id = 'evt-other'", lambda t: t.revision.pk),
    "deployment": ("commit_sha = 'fffffff'", lambda t: t.deployment.pk),
    "build": ("idempotency_key = 'other'", lambda t: t.build.pk),
    "job_transition": (
        "actor = 'someone'",
        lambda t: t.deployment.transitions.order_by("pk").first().pk,
    ),
    "status_sync": (
        "applied = NOT applied",
        lambda t: t.deployment.status_syncs.get().pk,
    ),
    "trigger_attempt": (
        "outcome = 'rejected'",
        lambda t: t.build.trigger_attempts.get().pk,
    ),
    "operator_action": ("reason = 'nothing'", lambda t: t.rotation.pk),
}


def test_every_ledger_is_covered():
    scanned = {kind for kind, ledger in LEDGERS.items() if ledger.scanned}
    assert set(EDITS) == scanned


@pytest.mark.parametrize("kind", sorted(EDITS))
def test_a_field_changed_in_any_ledger_is_named(trail, kind, capsys):
    edit, row = EDITS[kind]
    pk = row(trail)
    sql(f"UPDATE {table(kind)} SET {edit} WHERE id = %s", [pk])  # noqa: S608

    err = verify_fails(capsys)

    title = LEDGERS[kind].title
    assert f"ALTERED {title} {pk} (log index" in err
    assert err.count("ALTERED") == 1


@pytest.mark.parametrize(
    "kind", ["inbox_attempt", "document_revision", "trigger_attempt", "operator_action"]
)
def test_a_row_deleted_from_a_ledger_is_named(trail, kind, capsys):
    pk = EDITS[kind][1](trail)
    sql(f"DELETE FROM {table(kind)} WHERE id = %s", [pk])  # noqa: S608
    assert f"DELETED {LEDGERS[kind].title} {pk} (log index" in verify_fails(capsys)


def test_a_mismatch_body_changed_is_named(trail):
    mismatch = trail.event.mismatches.get()
    sql(
        "UPDATE webhooks_fingerprintmismatch SET raw_body = %s WHERE id = %s",
        [b'{"forged": true}', mismatch.pk],
    )
    assert log_verify().problems == [
        f"ALTERED fingerprint mismatch {mismatch.pk} (log index "
        f"{LogLeaf.objects.get(kind='fingerprint_mismatch').index}): body does not match "
        "its payload hash"
    ]


def test_a_real_purge_passes_and_a_purge_entry_whose_records_changed_is_named(
    trail, capsys
):
    InboxEvent.objects.filter(pk=trail.event.pk).update(
        received_at=timezone.now() - timedelta(days=40)
    )
    call_command("purge_inbox", "--older-than", "30")
    purge = LogLeaf.objects.get(kind="body_purge")
    assert purge.record_id == trail.event.pk
    # The inbox row's received_at changed by the test itself: its entry says otherwise.
    problems = log_verify().problems
    assert problems == [
        f"ALTERED inbox event {trail.event.pk} (log index "
        f"{LogLeaf.objects.get(kind='inbox_event').index}): fields changed since it was "
        "logged: received_at"
    ]
    sql(
        'UPDATE webhooks_operatoraction SET details = details || \'{"purged_at": "x"}\''
        " WHERE action = 'purge_bodies'"
    )
    problems = log_verify().problems
    assert (
        f"ALTERED body purge {trail.event.pk} (log index {purge.index}): operator "
        "action" in "\n".join(problems)
    )
    assert any("body missing outside any logged purge" in p for p in problems)


def test_an_evidence_purge_excuses_the_missing_body_a_forged_one_does_not(trail):
    mismatch = trail.event.mismatches.get()
    FingerprintMismatch.objects.filter(pk=mismatch.pk).update(
        last_seen_at=timezone.now() - timedelta(days=40)
    )
    call_command("purge_inbox", "--older-than", "30")
    purge = LogLeaf.objects.get(kind="evidence_purge")
    assert purge.record_id == mismatch.pk
    mismatch.refresh_from_db()
    assert mismatch.raw_body is None and mismatch.body_purged_at is not None
    assert log_verify().problems == []

    # A purge stamp rewritten afterwards is no longer the one the log holds.
    sql(
        "UPDATE webhooks_fingerprintmismatch SET body_purged_at = body_purged_at "
        "- interval '1 day' WHERE id = %s",
        [mismatch.pk],
    )
    problems = log_verify().problems
    index = LogLeaf.objects.get(kind="fingerprint_mismatch").index
    assert problems == [
        f"ALTERED evidence purge {mismatch.pk} (log index {purge.index}): the row no "
        "longer carries the stamp of the purge the log recorded",
        f"ALTERED fingerprint mismatch {mismatch.pk} (log index {index}): "
        "body missing outside any logged purge",
    ]


def test_evidence_dropped_without_a_purge_is_named(trail):
    mismatch = trail.event.mismatches.get()
    sql(
        "UPDATE webhooks_fingerprintmismatch SET raw_body = NULL, body_purged_at = now() "
        "WHERE id = %s",
        [mismatch.pk],
    )
    index = LogLeaf.objects.get(kind="fingerprint_mismatch").index
    assert log_verify().problems == [
        f"ALTERED fingerprint mismatch {mismatch.pk} (log index {index}): "
        "body missing outside any logged purge"
    ]


def test_rows_due_and_not_in_the_log_are_named_young_ones_are_not(trail, settings):
    late = InboxEventFactory(received_at=timezone.now() - timedelta(minutes=10))
    InboxEventFactory()  # just received: the next round takes it
    assert log_verify().problems == [
        f"NOT LOGGED inbox event {late.pk}: due at the last sealing round, not in the log"
    ]


def test_a_transition_that_does_not_follow_the_previous_one_is_unexplained(trail):
    first = trail.deployment.transitions.order_by("pk").first()
    sql(
        "UPDATE deployments_jobtransition SET from_status = 'failed' WHERE id = %s",
        [first.pk],
    )
    problems = log_verify().problems
    assert (
        f"UNEXPLAINED job transition {first.pk}: starts at failed, but the job was "
        "queued before it"
    ) in problems


def test_an_entry_of_the_log_changed_by_hand_is_named(trail, capsys):
    entry = LogLeaf.objects.get(kind="document_revision")
    sql(
        'UPDATE audit_logleaf SET leaf = replace(leaf, \'"change":"\', \'"change":"x\')'
        " WHERE index = %s",
        [entry.index],
    )
    err = verify_fails(capsys)
    assert "REWRITTEN the log's first" in err
    assert "is not the hash of the entries it covers" in err
    assert (
        f"ALTERED document revision {trail.revision.pk} (log index {entry.index})"
        in err
    )


def test_a_stored_checkpoint_changed_by_hand_is_named(trail):
    sql(
        r"UPDATE audit_logcheckpoint SET note = regexp_replace(note, '\n[0-9]+\n', E'\n9\n')"
    )
    problems = log_verify().problems
    assert problems and problems[0].startswith("LOG the latest checkpoint")
    assert "does not verify with the log's key" in problems[0]


def _kept(tmp_path, name="kept"):
    path = tmp_path / name
    path.write_bytes(Client().get("/audit/checkpoint").content)
    return path


def test_a_kept_checkpoint_verifies_while_the_log_extends_it(trail, tmp_path, capsys):
    kept = _kept(tmp_path)
    InboxEventFactory(received_at=timezone.now() - timedelta(minutes=10))
    seal_all()
    checkpoint_make()
    call_command("audit_verify", "--since", str(kept))
    out = capsys.readouterr().out
    assert "extends the kept checkpoint" in out and "consistency proof verified" in out


def test_a_log_cut_shorter_than_a_kept_checkpoint_is_truncated(trail, tmp_path, capsys):
    kept = _kept(tmp_path)
    last = LogLeaf.objects.order_by("-index").first().index
    sql("DELETE FROM audit_logleaf WHERE index = %s", [last])
    err = verify_fails(capsys, "--since", str(kept))
    assert "TRUNCATED the log has" in err
    assert "fewer than the kept checkpoint" in err


def test_a_checkpoint_of_another_log_is_refused(trail, tmp_path, capsys):
    skey, _ = key_generate("impostor.example/log")
    text = checkpoint_text(origin="impostor.example/log", size=1, root=b"\0" * 32)
    path = tmp_path / "other"
    path.write_text(note_sign(text=text, signer=signer_parse(skey)))
    err = verify_fails(capsys, "--since", str(path))
    assert f"LOG the kept checkpoint {path} does not verify with the log's key" in err


def test_the_checkpoint_folder_s_latest_copy_is_checked_too(
    trail, tmp_path, settings, capsys
):
    """Cut off and sealed again behind the product's back, the log is consistent with the
    database's own checkpoints; the copy ``AUDIT_CHECKPOINT_DIR`` kept names it."""
    from audit.checkpoints import checkpoint_publish
    from audit.merkle import stored_hash_count

    settings.AUDIT_CHECKPOINT_DIR = str(tmp_path)
    checkpoint_publish()
    assert (tmp_path / "latest").exists()
    last = LogLeaf.objects.order_by("-index").first()
    assert last.kind == "operator_action"
    sql(
        "UPDATE webhooks_operatoraction SET reason = 'forged' WHERE id = %s",
        [last.record_id],
    )
    sql("DELETE FROM audit_logleaf WHERE index >= %s", [last.index])
    sql(
        "DELETE FROM audit_lognode WHERE position >= %s",
        [stored_hash_count(last.index)],
    )
    sql("DELETE FROM audit_logcheckpoint")
    sql("DELETE FROM audit_logcursor WHERE kind = 'operator_action'")
    seal_all()
    checkpoint_make()

    err = verify_fails(capsys)
    assert "REWRITTEN the log does not extend the kept checkpoint" in err
    assert "(AUDIT_CHECKPOINT_DIR)" in err
    settings.AUDIT_CHECKPOINT_DIR = ""
    call_command("audit_verify")  # without the copy outside, nothing tells


def test_an_entry_of_no_known_kind_is_named(trail):
    from audit.leaves import LeafInput
    from audit.log import log_append

    log_append(leaves=[LeafInput(kind="mystery", record_id=1)])
    assert log_verify().problems == [
        f"LOG entry {LogLeaf.objects.get(kind='mystery').index}: mystery 1 is of no known kind"
    ]


def test_verification_reads_the_log_in_chunks_and_finds_the_same(trail):
    whole = log_verify()
    chunked = log_verify(chunk_size=3)
    assert whole.checked == chunked.checked and chunked.ok


def test_a_kept_checkpoint_given_as_a_value_is_checked():
    InboxEventFactory(received_at=timezone.now() - timedelta(minutes=10))
    seal_all()
    made = checkpoint_make()
    report = log_verify(kept=[KeptCheckpoint(label="auditor", note=made.note)])
    assert report.ok and report.notes
    assert base64.b64encode(bytes(made.root_hash)).decode() in made.note
