"""The verifiable log in the audit console: each ledger row's entry (its log index, and
whether the latest checkpoint covers it) on the lists and detail pages, and the "Download
evidence" of an inbox event, a research document and a deployment, for auditors too."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audit import verify_bundle
from audit.checkpoints import log_verifier_key
from audit.models import LogLeaf
from tests.webhooks.factories import InboxEventFactory

from .ledger_rows import seal_all, sealed_trail

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def trail(settings):
    trail = sealed_trail(settings)
    return trail


def index_of(kind: str, pk: int) -> int:
    return LogLeaf.objects.get(kind=kind, record_id=pk).index


def test_lists_show_each_row_s_entry_and_whether_a_checkpoint_covers_it(
    trail, auditor_client
):
    covered = index_of("inbox_event", trail.event.pk)
    InboxEventFactory(received_at=timezone.now() - timedelta(minutes=10))
    seal_all()  # logged, not in a checkpoint yet
    InboxEventFactory()  # not logged yet
    page = auditor_client.get(reverse("admin:webhooks_inboxevent_changelist"))
    html = page.content.decode()
    assert page.status_code == 200
    assert f"#{covered} <span" in html and "(in the latest checkpoint)" in html
    assert "(not in a checkpoint yet)" in html
    assert "not in the log yet" in html


@pytest.mark.parametrize(
    "changelist",
    [
        "webhooks_inboxevent",
        "webhooks_fingerprintmismatch",
        "trail_operatoraction",
        "research_documentrevision",
        "deployments_deployment",
        "deployments_build",
        "deployments_statussync",
    ],
)
def test_every_ledger_list_shows_the_entry_in_a_bounded_number_of_queries(
    trail, auditor_client, changelist
):
    url = reverse(f"admin:{changelist}_changelist")
    auditor_client.get(url)
    with CaptureQueriesContext(connection) as one:
        page = auditor_client.get(url)
    assert page.status_code == 200
    assert "(in the latest checkpoint)" in page.content.decode()
    seal_all()
    InboxEventFactory.create_batch(5)
    with CaptureQueriesContext(connection) as more:
        auditor_client.get(url)
    assert len(more) <= len(one) + 1  # not a query per row


def test_detail_pages_and_inlines_show_the_entry(trail, auditor_client):
    pages = {
        reverse("admin:webhooks_inboxevent_change", args=[trail.event.pk]): [
            ("inbox_event", trail.event.pk),
            ("inbox_attempt", trail.event.attempt_log.get().pk),
        ],
        reverse(
            "admin:webhooks_fingerprintmismatch_change",
            args=[trail.event.mismatches.get().pk],
        ): [("fingerprint_mismatch", trail.event.mismatches.get().pk)],
        reverse("admin:research_documentrevision_change", args=[trail.revision.pk]): [
            ("document_revision", trail.revision.pk)
        ],
        reverse("admin:research_researchdocument_change", args=[trail.document.pk]): [
            ("document_revision", trail.revision.pk)
        ],
        reverse("admin:deployments_deployment_change", args=[trail.deployment.pk]): [
            ("deployment", trail.deployment.pk),
            *[
                ("job_transition", pk)
                for pk in trail.deployment.transitions.values_list("pk", flat=True)
            ],
        ],
        reverse(
            "admin:deployments_statussync_change",
            args=[trail.deployment.status_syncs.get().pk],
        ): [("status_sync", trail.deployment.status_syncs.get().pk)],
        reverse("admin:trail_operatoraction_change", args=[trail.rotation.pk]): [
            ("operator_action", trail.rotation.pk)
        ],
    }
    for url, entries in pages.items():
        html = auditor_client.get(url).content.decode()
        for kind, pk in entries:
            assert f"#{index_of(kind, pk)} <span" in html, (url, kind)


@pytest.mark.parametrize(
    ("admin_name", "subject"),
    [
        ("webhooks_inboxevent", "inbox_event"),
        ("research_researchdocument", "research_document"),
        ("deployments_deployment", "deployment"),
    ],
)
def test_an_auditor_downloads_the_evidence_and_it_verifies_offline(
    trail, auditor_client, client, admin_name, subject
):
    pk = {
        "inbox_event": trail.event.pk,
        "research_document": trail.document.pk,
        "deployment": trail.deployment.pk,
    }[subject]
    page = auditor_client.get(reverse(f"admin:{admin_name}_change", args=[pk]))
    url = reverse(f"admin:{admin_name}_evidence", args=[pk])
    assert f'href="{url}"' in page.content.decode()
    assert "Download evidence" in page.content.decode()

    response = auditor_client.get(url)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == (
        f'attachment; filename="evidence-{subject}-{pk}.json"'
    )
    bundle = json.loads(response.content)
    report = verify_bundle.bundle_verify(bundle, vkey=log_verifier_key())
    assert report.ok, report.failures
    assert bundle["entries"]
    client.logout()
    assert client.get(url).status_code == 302  # to the login page
    assert auditor_client.get(
        reverse(f"admin:{admin_name}_evidence", args=[999999])
    ).status_code in (302, 404)
