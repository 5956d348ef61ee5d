"""Evidence of conflicting deliveries grows with the distinct bodies, not with the retries: each
conflicting body is stored once per event and its repeats are counted (docs/security.md,
"Evidence of conflicts"); and retention covers the evidence bodies and the signature-failure
counters too, by age."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import Client
from django.utils import timezone

from tests.threads import run_together
from tests.webhooks.factories import (
    FingerprintMismatchFactory,
    InboxEventFactory,
    conflicting_body,
    research_source,
    signed_post,
)
from trail.models import OperatorAction
from webhooks.models import FingerprintMismatch, SignatureFailure

pytestmark = pytest.mark.django_db


def stored_event(source):
    return InboxEventFactory(source=source, processing_status="processed")


def test_retries_of_one_conflicting_body_are_one_row_that_counts_them(source):
    event = stored_event(source)
    other = conflicting_body(event)
    http = Client()
    for _ in range(5):
        response = signed_post(http, source.slug, other, event_id=event.event_id)
        assert response.status_code == 409
    (evidence,) = FingerprintMismatch.objects.filter(event=event)
    assert evidence.repeat_count == 5
    assert evidence.last_seen_at >= evidence.received_at
    # Another conflicting body is evidence of its own.
    another = {**other, "data": {"summary": "something else"}}
    assert (
        signed_post(http, source.slug, another, event_id=event.event_id).status_code
        == 409
    )
    assert sorted(
        FingerprintMismatch.objects.filter(event=event).values_list(
            "repeat_count", flat=True
        )
    ) == [1, 5]


@pytest.mark.django_db(transaction=True)
def test_conflicting_retries_at_once_are_one_row_that_counts_each():
    source = research_source()
    event = stored_event(source)
    other = conflicting_body(event)

    def deliver() -> int:
        try:
            return signed_post(
                Client(), source.slug, other, event_id=event.event_id
            ).status_code
        finally:
            connections.close_all()

    codes, errors = run_together([deliver] * 10)
    assert not errors, errors
    assert codes == [409] * 10
    (evidence,) = FingerprintMismatch.objects.filter(event=event)
    assert evidence.repeat_count == 10


def test_retention_drops_old_evidence_bodies_and_counters_and_records_it(capsys):
    old = timezone.now() - timedelta(days=40)
    old_evidence = FingerprintMismatchFactory(received_at=old, last_seen_at=old)
    recent_evidence = FingerprintMismatchFactory()
    seen_lately = FingerprintMismatchFactory(received_at=old)  # a repeat came yesterday
    FingerprintMismatch.objects.filter(pk=seen_lately.pk).update(
        last_seen_at=timezone.now() - timedelta(days=1)
    )
    source = research_source()
    SignatureFailure.objects.create(
        source=source, reason="mismatch", window_start=old, count=3, last_seen_at=old
    )
    recent_failure = SignatureFailure.objects.create(
        source=source,
        reason="mismatch",
        window_start=timezone.now().replace(second=0, microsecond=0),
        count=1,
    )

    call_command("purge_inbox", "--older-than", "30")

    old_evidence.refresh_from_db()
    assert old_evidence.raw_body is None and old_evidence.body_purged_at is not None
    # Its hashes, fingerprints and counts stay: the evidence's metadata is kept.
    assert old_evidence.conflicting_payload_hash and old_evidence.repeat_count == 1
    for kept in (recent_evidence, seen_lately):
        kept.refresh_from_db()
        assert kept.raw_body is not None and kept.body_purged_at is None
    assert list(SignatureFailure.objects.values_list("pk", flat=True)) == [
        recent_failure.pk
    ]
    evidence_action = OperatorAction.objects.get(action="purge_evidence_bodies")
    assert evidence_action.details["mismatch_ids"] == [old_evidence.pk]
    counters_action = OperatorAction.objects.get(action="purge_signature_failures")
    assert counters_action.details["deleted"] == 1
    assert counters_action.actor_name.startswith("os:")


def test_marking_more_mismatches_than_one_action_takes_is_refused(monkeypatch):
    from core.actors import Actor
    from webhooks import investigations
    from webhooks.errors import SelectionTooLarge

    monkeypatch.setattr(investigations, "MARK_INVESTIGATED_MAX", 3)
    FingerprintMismatchFactory.create_batch(4)
    with pytest.raises(SelectionTooLarge):
        investigations.fingerprint_mismatches_mark_investigated(
            mismatches=FingerprintMismatch.objects.all(),
            actor=Actor.system(),
            note="all of them",
        )
    assert not FingerprintMismatch.objects.filter(
        investigated_at__isnull=False
    ).exists()
    action = investigations.fingerprint_mismatches_mark_investigated(
        mismatches=FingerprintMismatch.objects.filter(
            pk__in=FingerprintMismatch.objects.order_by("pk").values("pk")[:3]
        ),
        actor=Actor.system(),
        note="three",
    )
    assert action.event_count == 3
