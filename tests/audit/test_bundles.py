"""Evidence bundles of a research document, an inbox event and a deployment
(``manage.py audit_bundle``): every entry of the story with its inclusion proof and the
signed checkpoint, the raw bodies, and what is not provable yet listed as unproven; checked
offline by ``python -m audit.verify_bundle`` with the public key alone, its checks by kind
naming what does not hold together."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections import Counter
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit import verify_bundle
from audit.checkpoints import checkpoint_make, log_verifier_key
from audit.stories import evidence_bundle
from core.actors import Actor
from deployments.models import Deployment
from deployments.services.attempts import job_run
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import deployment_body, idempotent_post
from tests.deployments.receiver import Fault, Receiver
from trail.models import OperatorAction
from webhooks.models import FingerprintMismatch, InboxEvent
from webhooks.replay import inbox_events_replay

from .ledger_rows import every_ledger, seal_all, sealed_trail
from .tampering import sql

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def trail(settings):
    trail = sealed_trail(settings)
    return trail


def bundle_of(capsys, subject: str, identifier: str) -> dict:
    call_command("audit_bundle", subject, identifier)
    return json.loads(capsys.readouterr().out)


def kinds(bundle: dict) -> Counter:
    return Counter(json.loads(e["leaf"])["kind"] for e in bundle["entries"])


def verified(bundle: dict) -> verify_bundle.BundleReport:
    return verify_bundle.bundle_verify(bundle, vkey=log_verifier_key())


def test_an_inbox_event_s_bundle_holds_its_story_and_verifies_offline(trail, capsys):
    bundle = bundle_of(capsys, "inbox_event", str(trail.event.pk))

    assert set(bundle) == {"checkpoint", "public_key", "entries", "bodies"}
    assert kinds(bundle) == {
        "inbox_event": 1,
        "fingerprint_mismatch": 1,
        "inbox_attempt": 1,
        "document_revision": 1,
    }
    event = next(
        json.loads(e["leaf"])
        for e in bundle["entries"]
        if '"kind":"inbox_event"' in e["leaf"]
    )
    secret = trail.source.secrets.order_by("pk").first()
    assert (event["secret_id"], event["secret_fingerprint"]) == (
        secret.pk,
        secret.fingerprint,
    )
    assert secret.secret not in json.dumps(bundle)
    body = bytes(InboxEvent.objects.get(pk=trail.event.pk).raw_body)
    assert base64.b64decode(bundle["bodies"][hashlib.sha256(body).hexdigest()]) == body
    assert len(bundle["bodies"]) == 2  # the event's and the conflicting delivery's
    report = verified(bundle)
    assert report.ok, report.failures
    assert report.unproven == []


def test_a_research_document_s_bundle_tells_every_revision_and_its_event(trail, capsys):
    bundle = bundle_of(capsys, "research_document", trail.document.entity_id)
    assert kinds(bundle)["document_revision"] == 1
    assert kinds(bundle)["inbox_event"] == 1
    assert verified(bundle).ok
    assert bundle == bundle_of(capsys, "research_document", str(trail.document.pk))


def test_a_deployment_s_bundle_holds_its_key_transitions_and_status_syncs(
    trail, capsys
):
    bundle = bundle_of(capsys, "deployment", trail.deployment.public_id)
    assert kinds(bundle) == {"deployment": 1, "job_transition": 3, "status_sync": 1}
    deployment = next(
        json.loads(e["leaf"])
        for e in bundle["entries"]
        if '"kind":"deployment"' in e["leaf"]
    )
    assert deployment["idempotency_key"] == "dep-1"
    assert bundle["bodies"] == {}
    assert verified(bundle).ok


def test_a_deployment_s_bundle_holds_its_trigger_attempts(settings, capsys):
    """Triggered through the ``http`` executor to a real receiver that answered 503 first:
    both closed attempts are in the log and in the story, each checked offline."""
    settings.DEPLOY_TRIGGER_RETRY_BASE_SECONDS = 0.01
    _, token = api_client_make(name="ci")
    answer = idempotent_post(
        bearer_http(token), "/api/deployments/", deployment_body(), key="dep-http"
    )
    deployment = Deployment.objects.get(public_id=answer.json()["deployment_id"])
    with Receiver() as receiving:
        settings.DEPLOY_EXECUTOR = "http"
        settings.DEPLOY_HTTP_URL = receiving.url
        settings.DEPLOY_HTTP_SECRET = receiving.secret
        receiving.plan(deployment.public_id, Fault.status(503))
        run = {"kind": "deployment", "public_id": deployment.public_id, "worker": "w1"}
        assert job_run(**run) == "retry_scheduled"
        # Its retry comes due at once (the relay would publish it after its backoff).
        Deployment.objects.filter(pk=deployment.pk).update(next_attempt_at=None)
        assert job_run(**run) == "triggered"
    seal_all()
    checkpoint_make()

    bundle = bundle_of(capsys, "deployment", deployment.public_id)

    assert kinds(bundle)["trigger_attempt"] == 2
    outcomes = [
        json.loads(e["leaf"])["outcome"]
        for e in bundle["entries"]
        if '"kind":"trigger_attempt"' in e["leaf"]
    ]
    assert outcomes == ["transient", "delivered"]
    assert verified(bundle).ok, verified(bundle).failures


def test_an_operator_action_that_touched_the_event_is_in_its_story(trail, capsys):
    InboxEvent.objects.filter(pk=trail.event.pk).update(
        processing_status="dead_lettered"
    )
    action = inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk=trail.event.pk),
        actor=Actor.system(),
        reason="fixed upstream",
    )
    bundle = bundle_of(capsys, "inbox_event", str(trail.event.pk))
    # Made a moment ago: not in the log yet, so listed, not proven.
    [unproven] = bundle["unproven"]
    assert (unproven["kind"], unproven["id"]) == ("operator_action", action.pk)
    assert unproven["reason"] == "not in the log yet"
    assert json.loads(unproven["leaf"])["reason"] == "fixed upstream"
    report = verified(bundle)
    assert report.ok
    assert report.unproven == [f"operator_action {action.pk}: not in the log yet"]

    seal_all()
    bundle = evidence_bundle(subject="inbox_event", pk=trail.event.pk)
    assert bundle["unproven"][0]["reason"].startswith("logged at index")
    checkpoint_make()
    bundle = evidence_bundle(subject="inbox_event", pk=trail.event.pk)
    assert "unproven" not in bundle and kinds(bundle)["operator_action"] == 1
    assert verified(bundle).ok


def test_the_verifier_says_what_is_unproven_and_still_exits_zero(
    trail, capsys, tmp_path
):
    OperatorAction.objects.create(
        action="replay", actor_name="ops", event_ids=[trail.event.pk], event_count=1
    )
    path = tmp_path / "bundle.json"
    path.write_text(
        json.dumps(evidence_bundle(subject="inbox_event", pk=trail.event.pk))
    )
    assert verify_bundle.main([str(path), "--key", log_verifier_key()]) == 0
    out = capsys.readouterr().out
    assert "UNPROVEN operator_action" in out
    assert "4 entries verified; 1 record of the story not proven yet" in out


def test_a_purged_body_is_accounted_for_by_its_purge_entry(trail, capsys):
    InboxEvent.objects.filter(pk=trail.event.pk).update(
        received_at=timezone.now() - timedelta(days=40)
    )
    call_command("purge_inbox", "--older-than", "30")
    checkpoint_make()
    bundle = evidence_bundle(subject="inbox_event", pk=trail.event.pk)
    assert kinds(bundle)["body_purge"] == 1
    assert len(bundle["bodies"]) == 1  # the conflicting delivery's only
    purge = [e for e in bundle["entries"] if '"kind":"body_purge"' in e["leaf"]]
    without = copy.deepcopy(bundle)
    without["entries"].remove(purge[0])
    assert verified(bundle).ok  # the bundle says what the log holds
    failures = verified(without).failures
    assert any(
        "the body its payload_hash names is not in the bundle" in f for f in failures
    )


def test_a_purged_evidence_body_is_accounted_for_by_its_purge_entry(trail, capsys):
    InboxEvent.objects.filter(pk=trail.event.pk).update(
        received_at=timezone.now() - timedelta(days=40)
    )
    FingerprintMismatch.objects.filter(event=trail.event).update(
        last_seen_at=timezone.now() - timedelta(days=40)
    )
    call_command("purge_inbox", "--older-than", "30")
    seal_all()  # the purges' operator actions
    checkpoint_make()
    bundle = evidence_bundle(subject="inbox_event", pk=trail.event.pk)
    assert kinds(bundle)["body_purge"] == 1
    assert kinds(bundle)["evidence_purge"] == 1
    actions = [
        json.loads(e["leaf"])["action"]
        for e in bundle["entries"]
        if '"kind":"operator_action"' in e["leaf"]
    ]
    assert "purge_evidence_bodies" in actions
    assert bundle["bodies"] == {}  # both bodies are gone, both purges say so
    assert verified(bundle).ok, verified(bundle).failures

    purge = next(e for e in bundle["entries"] if '"kind":"evidence_purge"' in e["leaf"])
    without = copy.deepcopy(bundle)
    without["entries"].remove(purge)
    assert any(
        "the body its conflicting_payload_hash names is not in the bundle" in f
        for f in verified(without).failures
    )


def test_checks_by_kind_name_an_entry_that_does_not_hold_together(trail):
    bundle = evidence_bundle(subject="inbox_event", pk=trail.event.pk)
    assert verified(bundle).ok
    event_entry = next(
        e for e in bundle["entries"] if '"kind":"inbox_event"' in e["leaf"]
    )

    without_event = copy.deepcopy(bundle)
    without_event["entries"].remove(event_entry)
    failures = verified(without_event).failures
    named = f"the inbox event {trail.event.pk} it names is not in the bundle"
    assert sum(named in f for f in failures) == 3  # the attempt, mismatch and revision

    without_body = copy.deepcopy(bundle)
    without_body["bodies"].pop(trail.event.payload_hash)
    [failure] = verified(without_body).failures
    assert (
        "inbox_event" in failure
        and "payload_hash names is not in the bundle" in failure
    )


def test_a_revision_whose_content_hash_is_not_its_event_s_is_named(settings, capsys):
    trail = every_ledger(settings)
    # Changed before the sealer took it in: the log holds it as it is, consistently
    # signed, and only the story shows that the revision and its event disagree.
    sql(
        "UPDATE research_documentrevision SET content_hash = 'sha256:other' WHERE id = %s",
        [trail.revision.pk],
    )
    seal_all()
    checkpoint_make()
    failures = verified(
        evidence_bundle(subject="inbox_event", pk=trail.event.pk)
    ).failures
    assert len(failures) == 1
    assert f"document_revision {trail.revision.pk}" in failures[0]
    assert (
        "its content hash 'sha256:other' is not the one its event's body carries"
        in (failures[0])
    )


def test_one_changed_byte_of_any_entry_fails_and_names_it(trail):
    bundle = evidence_bundle(subject="deployment", pk=trail.deployment.pk)
    for position, entry in enumerate(bundle["entries"]):
        changed = copy.deepcopy(bundle)
        changed["entries"][position]["leaf"] = entry["leaf"].replace(
            '"id":', '"id":1', 1
        )
        failures = verified(changed).failures
        assert failures and failures[0].startswith(f"entry {position} ")


def test_the_command_refuses_what_does_not_exist(trail):
    with pytest.raises(CommandError, match="no deployment 'dep_nope'"):
        call_command("audit_bundle", "deployment", "dep_nope")
    with pytest.raises(CommandError, match="no inbox_event"):
        call_command("audit_bundle", "inbox_event", "not-an-id")
    with pytest.raises(CommandError):
        call_command("audit_bundle", "invoice", "1")


def test_an_inbox_event_is_found_by_source_and_event_id(trail, capsys):
    by_pk = bundle_of(capsys, "inbox_event", str(trail.event.pk))
    by_id = bundle_of(
        capsys, "inbox_event", f"{trail.source.slug}/{trail.event.event_id}"
    )
    assert by_pk == by_id
