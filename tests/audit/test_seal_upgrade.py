"""A deployment that sealed rows before the trail was keyed: its seals (version 1, plain SHA-256
links) are re-keyed by the upgrade and keep verifying, their rows are still checked, the bodies
it had purged get their record, and the log's first sealing round takes the chain in, in its
order, after which no seal is made and the log goes on.

The database is taken back to before the upgrade, filled as the code of then left it (the old
formulas are written out here), and migrated forward, as an existing deployment would be."""

from __future__ import annotations

import hashlib
from datetime import UTC, timedelta

import pytest
from django.utils import timezone

from audit.leaves import leaf_decode
from audit.models import AuditSeal, LogLeaf
from audit.sealer import ledger_rows_seal
from audit.services import audit_trail_verify
from audit.verification import log_verify
from tests.core.test_migrations import latest, migrate
from tests.webhooks.factories import InboxEventFactory
from trail.models import OperatorAction
from webhooks.models import InboxEvent

from .tampering import sql, verify_fails

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.migrations]

BEFORE_THE_UPGRADE = [
    ("audit", "0002_operator_actions_to_webhooks"),
    ("webhooks", "0003_registries_and_admin_names"),
]


@pytest.fixture
def before_the_upgrade():
    yield migrate(BEFORE_THE_UPGRADE)
    migrate(latest())


def old_digest(pk, payload_hash, received_at):
    received = received_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return hashlib.sha256(f"{pk}|{payload_hash}|{received}".encode()).hexdigest()


def old_seal_hash(previous_hash, rows_hash, sequence, row_count):
    line = f"{previous_hash}|{rows_hash}|{sequence}|{row_count}"
    return hashlib.sha256(line.encode()).hexdigest()


def old_rows_hash(digests):
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


def seal_the_old_way(apps, events, *, sequence, previous_hash):
    seal_model = apps.get_model("audit", "AuditSeal")
    entry_model = apps.get_model("audit", "AuditSealEntry")
    digests = [old_digest(e.pk, e.payload_hash, e.received_at) for e in events]
    rows_hash = old_rows_hash(digests)
    seal = seal_model.objects.create(
        sequence=sequence,
        previous_hash=previous_hash,
        rows_hash=rows_hash,
        seal_hash=old_seal_hash(previous_hash, rows_hash, sequence, len(events)),
        row_count=len(events),
        first_event_id=events[0].pk,
        last_event_id=events[-1].pk,
        horizon=timezone.now() - timedelta(minutes=1),
    )
    for event, digest in zip(events, digests, strict=True):
        entry_model.objects.create(
            inbox_event_id=event.pk, seal_id=seal.pk, row_digest=digest
        )
    return seal


def fill_as_before_the_upgrade(old):
    source = old.get_model("webhooks", "WebhookSource").objects.create(
        slug="legacy", handler="research"
    )
    inbox = old.get_model("webhooks", "InboxEvent")
    received = timezone.now() - timedelta(days=40)
    events = []
    for n in range(5):
        body = f'{{"event_id": "legacy-{n}"}}'.encode()
        events.append(
            inbox.objects.create(
                source_id=source.pk,
                event_id=f"legacy-{n}",
                event_type="research.document.updated",
                payload_hash=hashlib.sha256(body).hexdigest(),
                content_fingerprint="c" * 64,
                raw_body=body,
                received_at=received + timedelta(seconds=n),
                processing_status="processed",
            )
        )
    # purge_inbox as it was: two batches, no record of either.
    first_purge = timezone.now() - timedelta(days=1)
    inbox.objects.filter(pk=events[0].pk).update(
        raw_body=None, body_purged_at=first_purge
    )
    inbox.objects.filter(pk=events[1].pk).update(
        raw_body=None, body_purged_at=first_purge + timedelta(seconds=1)
    )
    first = seal_the_old_way(old, events[:3], sequence=1, previous_hash="0" * 64)
    seal_the_old_way(old, events[3:], sequence=2, previous_hash=first.seal_hash)
    old.get_model("webhooks", "OperatorAction").objects.create(
        action="replay", actor_name="ops", event_ids=[events[4].pk], event_count=1
    )
    return [e.pk for e in events]


def test_seals_made_before_the_upgrade_keep_verifying_and_enter_the_log_in_order(
    before_the_upgrade, capsys
):
    pks = fill_as_before_the_upgrade(before_the_upgrade)

    migrate(latest())
    # The log's first round: the chain is verified and taken in, then what is due.
    ledger_rows_seal(now=timezone.now() + timedelta(minutes=5))

    assert list(AuditSeal.objects.order_by("sequence").values_list("version")) == [
        (1,),
        (1,),
    ]
    recorded = OperatorAction.objects.filter(action="purge_bodies").order_by("pk")
    assert [a.event_ids for a in recorded] == [[pks[0]], [pks[1]]]
    report = audit_trail_verify()
    assert report.ok, report
    assert (report.legacy_seals, report.rows_checked) == (2, 5)
    # The chain's rows in its order, each seal after its rows, then the purges it had made,
    # then the entry that retires it; then what no seal held (the replay, the purges'
    # records).
    seals = list(AuditSeal.objects.order_by("sequence").values_list("pk", flat=True))
    logged = list(LogLeaf.objects.order_by("index").values_list("kind", "record_id"))
    assert logged[:10] == [
        *[("inbox_event", pk) for pk in pks[:3]],
        ("audit_seal", seals[0]),
        *[("inbox_event", pk) for pk in pks[3:]],
        ("audit_seal", seals[1]),
        ("body_purge", pks[0]),
        ("body_purge", pks[1]),
        ("audit_chain_retired", 2),
    ]
    retired = leaf_decode(LogLeaf.objects.get(kind="audit_chain_retired").leaf)
    assert (retired["seals"], retired["verified"], retired["rows_checked"]) == (
        2,
        True,
        5,
    )
    assert retired["head_hash"] == AuditSeal.objects.get(sequence=2).seal_hash
    assert sorted(kind for kind, _ in logged[10:]) == ["operator_action"] * 3

    newer = InboxEventFactory(received_at=timezone.now() - timedelta(minutes=10))
    appended = ledger_rows_seal(now=timezone.now() + timedelta(minutes=5))
    assert appended.appended == {"inbox_event": 1}
    assert AuditSeal.objects.count() == 2  # retired: no seal is made any more
    assert LogLeaf.objects.filter(kind="inbox_event", record_id=newer.pk).exists()
    report = audit_trail_verify()
    assert report.ok, report
    assert log_verify().ok

    # Rows sealed before the upgrade are still checked: by their sealed payload hash and
    # received time, and their bodies against the payload hash; and by the log.
    sql(
        f"UPDATE {InboxEvent._meta.db_table} SET payload_hash = %s WHERE id = %s",  # noqa: S608
        ["f" * 64, pks[2]],
    )
    sql(
        f"UPDATE {InboxEvent._meta.db_table} SET raw_body = %s WHERE id = %s",  # noqa: S608
        [b"{}", pks[3]],
    )
    err = verify_fails(capsys)
    assert f"ALTERED inbox event {pks[2]}: sealed fields changed" in err
    assert (
        f"ALTERED inbox event {pks[3]}: body does not match its payload hash "
        "(HMAC chain)"
    ) in err
    assert "fields changed since it was logged: payload_hash" in err
    assert newer.pk not in audit_trail_verify().altered_rows


def test_an_old_seal_recomputed_the_old_unkeyed_way_after_the_upgrade_is_caught(
    before_the_upgrade,
):
    pks = fill_as_before_the_upgrade(before_the_upgrade)
    migrate(latest())
    ledger_rows_seal()
    assert audit_trail_verify().ok

    # The attacker changes a row sealed in seal #2 and recomputes that seal as the old code
    # would have, without the key.
    row = InboxEvent.objects.get(pk=pks[4])
    forged_hash = "f" * 64
    sql(
        f"UPDATE {InboxEvent._meta.db_table} SET payload_hash = %s WHERE id = %s",  # noqa: S608
        [forged_hash, row.pk],
    )
    digests = dict(
        AuditSeal.objects.get(sequence=2).entries.values_list(
            "inbox_event_id", "row_digest"
        )
    )
    digests[row.pk] = old_digest(row.pk, forged_hash, row.received_at)
    seal = AuditSeal.objects.get(sequence=2)
    rows_hash = old_rows_hash([digests[pk] for pk in sorted(digests)])
    sql(
        "UPDATE audit_auditsealentry SET row_digest = %s WHERE inbox_event_id = %s",
        [digests[row.pk], row.pk],
    )
    sql(
        "UPDATE audit_auditseal SET rows_hash = %s, seal_hash = %s WHERE id = %s",
        [
            rows_hash,
            old_seal_hash(seal.previous_hash, rows_hash, 2, seal.row_count),
            seal.pk,
        ],
    )

    report = audit_trail_verify()

    assert not report.ok
    assert report.broken_seals[0].startswith("seal #2:")
    assert "AUDIT_SEAL_KEY" in report.broken_seals[0]


def test_an_old_chain_that_was_already_broken_stays_broken_after_the_upgrade(
    before_the_upgrade,
):
    """Before the upgrade, someone changed a sealed row and its entry and rows_hash, but not
    the seal's hash: the old chain names seal #1. Re-keying it would make it whole again."""
    pks = fill_as_before_the_upgrade(before_the_upgrade)
    old = before_the_upgrade
    row = old.get_model("webhooks", "InboxEvent").objects.get(pk=pks[2])
    entry = old.get_model("audit", "AuditSealEntry")
    digests = dict(
        entry.objects.filter(seal__sequence=1).values_list(
            "inbox_event_id", "row_digest"
        )
    )
    digests[row.pk] = old_digest(row.pk, "f" * 64, row.received_at)
    sql(
        f"UPDATE {InboxEvent._meta.db_table} SET payload_hash = %s WHERE id = %s",  # noqa: S608
        ["f" * 64, row.pk],
    )
    sql(
        "UPDATE audit_auditsealentry SET row_digest = %s WHERE inbox_event_id = %s",
        [digests[row.pk], row.pk],
    )
    sql(
        "UPDATE audit_auditseal SET rows_hash = %s WHERE sequence = 1",
        [old_rows_hash([digests[pk] for pk in sorted(digests)])],
    )

    migrate(latest())
    ledger_rows_seal()

    report = audit_trail_verify()
    assert [b.split(":")[0] for b in report.broken_seals] == ["seal #1"]
    assert "AUDIT_SEAL_KEY" in report.broken_seals[0]
    # The log took the chain in with what its verification found, once and for good.
    retired = leaf_decode(LogLeaf.objects.get(kind="audit_chain_retired").leaf)
    assert retired["verified"] is False
    assert retired["problems"][0].startswith("BROKEN seal #1:")
