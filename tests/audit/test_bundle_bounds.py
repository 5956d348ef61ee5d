"""Evidence bundles are bounded (docs/security.md, "Evidence bundles"): past
``AUDIT_BUNDLE_ENTRIES_PER_KIND`` records of one kind, a story keeps the first half and the
latest half of them and names the others under ``"omitted"`` (their count, the range of their
ids and of their log indexes); raw bodies past ``AUDIT_BUNDLE_BODY_BYTES`` are named by their
hash. What is kept still verifies offline, and the verifier prints what was left out."""

from __future__ import annotations

import copy
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import Client

from audit import verify_bundle
from audit.checkpoints import checkpoint_make, log_verifier_key
from audit.models import LogLeaf
from audit.stories import evidence_bundle
from core.actors import Actor
from deployments.models import Deployment, JobTransition, StatusSync
from deployments.services.reports import status_sync_record
from research.models import DocumentRevision
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import deployment_body, idempotent_post
from tests.integrations.research.factories import research_event
from tests.processes import ROOT
from tests.webhooks.factories import research_source, signed_post
from webhooks.models import FingerprintMismatch, InboxAttempt, InboxEvent
from webhooks.processing import inbox_event_process
from webhooks.replay import inbox_events_replay

from .ledger_rows import seal_all

pytestmark = pytest.mark.django_db(transaction=True)

# What docs/security.md promises of a deployment's bundle with the default settings,
# whatever its clients report.
DEPLOYMENT_BUNDLE_BOUND_BYTES = 1024 * 1024


def leaves_of(bundle: dict) -> list[dict]:
    return [json.loads(entry["leaf"]) for entry in bundle["entries"]]


def kinds(bundle: dict) -> Counter:
    return Counter(leaf["kind"] for leaf in leaves_of(bundle))


def ids_of(bundle: dict, kind: str) -> list[int]:
    return [leaf["id"] for leaf in leaves_of(bundle) if leaf["kind"] == kind]


def omitted_of(bundle: dict, kind: str) -> dict:
    [item] = [i for i in bundle["omitted"]["records"] if i["kind"] == kind]
    return item


def verified(bundle: dict) -> verify_bundle.BundleReport:
    report = verify_bundle.bundle_verify(bundle, vkey=log_verifier_key())
    assert report.ok, report.failures
    return report


def index_span(kind: str, ids: list[int]) -> list[int]:
    indexes = list(
        LogLeaf.objects.filter(kind=kind, record_id__in=ids).values_list(
            "index", flat=True
        )
    )
    return [min(indexes), max(indexes)]


def verify_as_python_m(tmp_path, bundle_text: str) -> subprocess.CompletedProcess:
    """``python -m audit.verify_bundle FILE --key KEY`` as an auditor runs it: no Django, no
    settings, no database."""
    path = tmp_path / "bundle.json"
    path.write_text(bundle_text)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "audit.verify_bundle",
            str(path),
            "--key",
            log_verifier_key(),
        ],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_thousands_of_status_syncs_make_a_bounded_bundle_that_verifies(
    settings, capsys, caplog, tmp_path
):
    """One API client reports 3,000 statuses of its deployment, each with the longest
    detail it may give, flipping it between succeeded and failed (each one applies, and
    moves the job: a transition too)."""
    per_kind = settings.AUDIT_BUNDLE_ENTRIES_PER_KIND
    client, token = api_client_make(name="ci")
    answer = idempotent_post(
        bearer_http(token), "/api/deployments/", deployment_body(), key="dep-1"
    )
    deployment = Deployment.objects.get(public_id=answer.json()["deployment_id"])
    start = deployment.status_changed_at
    # Each transition is logged at INFO: 3,000 lines the test does not read.
    caplog.set_level(logging.WARNING, logger="deployments.services")
    with transaction.atomic():
        for number in range(3000):
            status_sync_record(
                client=client,
                target_kind="deployment",
                target_id=deployment.public_id,
                status="succeeded" if number % 2 else "failed",
                reported_at=start + timedelta(milliseconds=number + 1),
                detail=f"{number:04d}" + "x" * 996,
            )
    seal_all()
    checkpoint_make()
    syncs = list(
        StatusSync.objects.filter(job=deployment)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    transitions = list(
        JobTransition.objects.filter(job=deployment)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    assert len(syncs) == 3000 and len(transitions) >= 3000

    call_command("audit_bundle", "deployment", deployment.public_id)
    text = capsys.readouterr().out
    bundle = json.loads(text)

    assert len(text.encode()) < DEPLOYMENT_BUNDLE_BOUND_BYTES
    assert kinds(bundle) == {
        "deployment": 1,
        "status_sync": per_kind,
        "job_transition": per_kind,
    }
    # The first half and the latest half of each kind, and what is left out, named.
    half = per_kind // 2
    assert ids_of(bundle, "status_sync") == syncs[:half] + syncs[-half:]
    assert ids_of(bundle, "job_transition") == transitions[:half] + transitions[-half:]
    left_out = syncs[half:-half]
    assert omitted_of(bundle, "status_sync") == {
        "kind": "status_sync",
        "count": len(left_out),
        "ids": [left_out[0], left_out[-1]],
        "indexes": index_span("status_sync", left_out),
    }
    left_out = transitions[half:-half]
    assert omitted_of(bundle, "job_transition") == {
        "kind": "job_transition",
        "count": len(left_out),
        "ids": [left_out[0], left_out[-1]],
        "indexes": index_span("job_transition", left_out),
    }
    assert bundle["omitted"]["entries_per_kind"] == per_kind

    checked = verify_as_python_m(tmp_path, text)
    assert checked.returncode == 0, checked.stderr
    assert f"OMITTED status_sync: {len(syncs) - per_kind} records" in checked.stdout
    assert (
        f"bundle OK: {1 + 2 * per_kind} entries verified; "
        f"{len(syncs) + len(transitions) - 2 * per_kind} records of the story left out"
    ) in checked.stdout

    # A kept entry changed still fails, and is named.
    changed = copy.deepcopy(bundle)
    changed["entries"][-1]["leaf"] = changed["entries"][-1]["leaf"].replace(
        '"succeeded"', '"failed"', 1
    )
    checked = verify_as_python_m(tmp_path, json.dumps(changed))
    assert checked.returncode == 1
    assert f"FAIL entry {len(bundle['entries']) - 1} " in checked.stderr


def _document_with_revisions(count: int):
    source = research_source()
    http = Client()
    entity_id = "doc_many_versions"
    events = []
    for version in range(1, count + 1):
        body = research_event(entity_id=entity_id, source_version=version)
        assert signed_post(http, source.slug, body).status_code == 202
        event = InboxEvent.objects.get(source=source, event_id=body["event_id"])
        inbox_event_process(inbox_event_id=event.pk, worker="worker-1")
        events.append(event.pk)
    return source, entity_id, events


def test_a_document_with_many_revisions_keeps_its_first_and_latest(settings, capsys):
    settings.AUDIT_BUNDLE_ENTRIES_PER_KIND = 6
    _, entity_id, events = _document_with_revisions(15)
    seal_all()
    checkpoint_make()
    revisions = list(
        DocumentRevision.objects.filter(document__entity_id=entity_id)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    assert len(revisions) == 15
    document = DocumentRevision.objects.get(pk=revisions[0]).document

    bundle = evidence_bundle(subject="research_document", pk=document.pk)

    kept = revisions[:3] + revisions[-3:]
    assert ids_of(bundle, "document_revision") == kept
    # Each revision kept comes with its event, that event's body and its attempt.
    kept_events = events[:3] + events[-3:]
    assert ids_of(bundle, "inbox_event") == kept_events
    assert kinds(bundle)["inbox_attempt"] == 6
    assert len(bundle["bodies"]) == 6
    assert omitted_of(bundle, "document_revision") == {
        "kind": "document_revision",
        "count": 9,
        "ids": [revisions[3], revisions[-4]],
        "indexes": index_span("document_revision", revisions[3:-3]),
    }
    report = verified(bundle)
    assert report.omitted == [
        f"document_revision: 9 records, ids {revisions[3]} to {revisions[-4]}, "
        "log indexes {} to {}".format(*index_span("document_revision", revisions[3:-3]))
    ]

    # More of the story on demand: the command's own bound.
    call_command(
        "audit_bundle",
        "research_document",
        entity_id,
        "--entries-per-kind",
        "15",
    )
    whole = json.loads(capsys.readouterr().out)
    assert ids_of(whole, "document_revision") == revisions
    assert ids_of(whole, "inbox_event") == events
    assert "omitted" not in whole
    verified(whole)
    with pytest.raises(CommandError, match="at least 2"):
        call_command(
            "audit_bundle", "research_document", entity_id, "--entries-per-kind", "1"
        )


def test_an_event_with_many_attempts_and_conflicting_deliveries_is_bounded(settings):
    settings.AUDIT_BUNDLE_ENTRIES_PER_KIND = 4
    source = research_source()
    http = Client()
    body = research_event()
    assert signed_post(http, source.slug, body).status_code == 202
    event = InboxEvent.objects.get(source=source, event_id=body["event_id"])
    inbox_event_process(inbox_event_id=event.pk, worker="worker-1")
    # Seven conflicting deliveries (each its own evidence, with its body), and five
    # replays (each a new attempt).
    for version in range(7):
        conflicting = {
            **body,
            "entity": {**body["entity"], "source_version": 50 + version},
        }
        assert signed_post(http, source.slug, conflicting).status_code == 409
    for _ in range(5):
        InboxEvent.objects.filter(pk=event.pk).update(processing_status="dead_lettered")
        inbox_events_replay(
            events_queryset=InboxEvent.objects.filter(pk=event.pk),
            actor=Actor.system(),
            reason="again",
        )
        inbox_event_process(inbox_event_id=event.pk, worker="worker-1")
    seal_all()
    checkpoint_make()
    mismatches = list(
        FingerprintMismatch.objects.filter(event=event)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    attempts = list(
        InboxAttempt.objects.filter(event=event)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    assert len(mismatches) == 7 and len(attempts) == 6

    bundle = evidence_bundle(subject="inbox_event", pk=event.pk)

    assert ids_of(bundle, "inbox_event") == [event.pk]
    assert ids_of(bundle, "fingerprint_mismatch") == mismatches[:2] + mismatches[-2:]
    assert ids_of(bundle, "inbox_attempt") == attempts[:2] + attempts[-2:]
    # The event's body and the bodies of the mismatches kept, none of the others.
    kept_hashes = set(
        FingerprintMismatch.objects.filter(
            pk__in=mismatches[:2] + mismatches[-2:]
        ).values_list("conflicting_payload_hash", flat=True)
    )
    assert set(bundle["bodies"]) == {event.payload_hash, *kept_hashes}
    assert omitted_of(bundle, "fingerprint_mismatch")["count"] == 3
    assert omitted_of(bundle, "inbox_attempt")["count"] == 2
    assert omitted_of(bundle, "operator_action")["count"] == 1
    verified(bundle)


def test_bodies_past_the_byte_bound_are_named_by_their_hash(settings, tmp_path):
    _, entity_id, events = _document_with_revisions(4)
    seal_all()
    checkpoint_make()
    rows = InboxEvent.objects.filter(pk__in=events).order_by("pk")
    sizes = [len(bytes(row.raw_body)) for row in rows]
    # Room for the first two bodies only.
    settings.AUDIT_BUNDLE_BODY_BYTES = sizes[0] + sizes[1]
    document = DocumentRevision.objects.filter(document__entity_id=entity_id).first()

    bundle = evidence_bundle(subject="research_document", pk=document.document_id)

    hashes = [row.payload_hash for row in rows]
    assert set(bundle["bodies"]) == set(hashes[:2])
    assert bundle["omitted"]["bodies"] == [
        {"hash": hashes[2], "bytes": sizes[2]},
        {"hash": hashes[3], "bytes": sizes[3]},
    ]
    assert bundle["omitted"]["body_bytes"] == sizes[0] + sizes[1]
    assert "records" not in bundle["omitted"]
    report = verified(bundle)
    assert f"body {hashes[2]} ({sizes[2]} bytes)" in report.omitted

    # A body neither in the bundle nor named as left out still fails.
    unnamed = copy.deepcopy(bundle)
    unnamed["omitted"]["bodies"].pop()
    failures = verify_bundle.bundle_verify(unnamed, vkey=log_verifier_key()).failures
    assert len(failures) == 1
    assert "the body its payload_hash names is not in the bundle" in failures[0]


def test_the_verifier_refuses_an_omitted_member_it_cannot_read(settings):
    settings.AUDIT_BUNDLE_ENTRIES_PER_KIND = 2
    _, entity_id, _ = _document_with_revisions(3)
    seal_all()
    checkpoint_make()
    document = DocumentRevision.objects.filter(document__entity_id=entity_id).first()
    bundle = evidence_bundle(subject="research_document", pk=document.document_id)
    verified(bundle)
    for broken in (
        [],
        {"records": {}},
        {"records": [{"kind": "status_sync", "count": "many"}]},
        {"records": [{"kind": "status_sync", "count": 2, "ids": [9, 3]}]},
        {"records": [{"kind": 7, "count": 2, "ids": [1, 3], "indexes": None}]},
        {"bodies": [{"hash": "not-a-hash", "bytes": 3}]},
    ):
        changed = {**bundle, "omitted": broken}
        failures = verify_bundle.bundle_verify(
            changed, vkey=log_verifier_key()
        ).failures
        assert failures and failures[0].startswith("omitted"), (broken, failures)
