"""The GitHub handler, fed InboxEvent rows built from GitHub's real payloads."""

import copy
import hashlib
import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from core.errors import PermanentProcessingError
from core.services import api_client_create
from deployments.models import Deployment, JobTransition
from integrations.github import integration as github_integration
from tests.webhooks.factories import WebhookSourceFactory, as_meta, signed_headers
from webhooks.models import InboxEvent, WebhookSource

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[2] / "integrations" / "github" / "fixtures"
SHA = "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture
def source(db):
    return WebhookSource.objects.create(
        slug="github", scheme="github", handler="github"
    )


@pytest.fixture
def deployment(db):
    client, _ = api_client_create(name="gh-ci")
    return Deployment.objects.create(
        client=client,
        idempotency_key="k",
        repository="codertocat/hello-world",
        commit_sha=SHA[:12],
        environment="production",
    )


_counter = iter(range(1, 10_000))


def handle(source, event_type: str, payload: dict | bytes):
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    event = InboxEvent.objects.create(
        source=source,
        event_id=f"delivery-{next(_counter)}",
        event_type=event_type,
        payload_hash=hashlib.sha256(raw).hexdigest(),
        content_fingerprint=hashlib.sha256(raw).hexdigest(),
        raw_body=raw,
        processing_status="processing",
    )
    with transaction.atomic():
        InboxEvent.objects.select_for_update().get(pk=event.pk)
        return github_integration.handle(event)


def status_payload(state: str, status_id: int, **deployment_overrides) -> dict:
    payload = copy.deepcopy(fixture("deployment_status__basic"))
    payload["deployment_status"]["state"] = state
    payload["deployment_status"]["id"] = status_id
    payload["deployment"].update(deployment_overrides)
    return payload


def test_ping_is_processed_as_a_no_op(source):
    assert handle(source, "ping", fixture("ping__basic")).status == "processed"


def test_other_events_are_unsupported(source, deployment):
    result = handle(source, "deployment", fixture("deployment__created"))
    assert result.status == "ignored_unsupported"
    deployment.refresh_from_db()
    assert deployment.status == "queued"


def test_the_real_success_payload_succeeds_the_matching_deployment(source, deployment):
    result = handle(source, "deployment_status", fixture("deployment_status__basic"))
    assert result.status == "processed"
    deployment.refresh_from_db()
    assert deployment.status == "succeeded"
    assert deployment.last_github_status_id == 209916254
    transition = JobTransition.objects.get(deployment=deployment)
    assert transition.to_status == "succeeded"
    assert transition.actor.startswith("github:")


def test_the_installation_variant_is_handled_too(source, deployment):
    payload = fixture("deployment_status__with-installation")
    assert handle(source, "deployment_status", payload).status == "processed"
    deployment.refresh_from_db()
    assert deployment.status == "succeeded"


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("success", "succeeded"),
        ("failure", "failed"),
        ("error", "failed"),
        ("in_progress", "running"),
        ("queued", "queued"),
        ("pending", "queued"),
    ],
)
def test_state_mapping(source, deployment, state, status):
    handle(source, "deployment_status", status_payload("in_progress", 1))
    assert handle(source, "deployment_status", status_payload(state, 2)).status == (
        "processed"
    )
    deployment.refresh_from_db()
    assert deployment.status == status


def test_an_in_progress_status_gives_the_deployment_a_lease(
    source, deployment, settings
):
    """Reported running by GitHub as by status-sync: the sweep fails the deployment if
    nothing more is reported within the lease (tests/deployments/test_progress_deadline.py)."""
    settings.DEPLOY_RUNNING_LEASE_SECONDS = 120
    before = timezone.now()
    handle(source, "deployment_status", status_payload("in_progress", 1))
    deployment.refresh_from_db()
    assert deployment.status == "running"
    lease = timedelta(seconds=120)
    assert before + lease <= deployment.lease_expires_at <= timezone.now() + lease


def test_an_older_status_id_is_ignored_out_of_order(source, deployment):
    handle(source, "deployment_status", status_payload("in_progress", 10))
    result = handle(source, "deployment_status", status_payload("queued", 9))
    assert result.status == "ignored_out_of_order"
    same = handle(source, "deployment_status", status_payload("success", 10))
    assert same.status == "ignored_out_of_order"
    deployment.refresh_from_db()
    assert deployment.status == "running"
    assert deployment.last_github_status_id == 10


def test_a_non_terminal_never_replaces_a_terminal(source, deployment):
    handle(source, "deployment_status", status_payload("failure", 10))
    result = handle(source, "deployment_status", status_payload("in_progress", 11))
    assert result.status == "ignored_out_of_order"
    deployment.refresh_from_db()
    assert deployment.status == "failed"
    # a newer terminal status does replace it
    assert handle(
        source, "deployment_status", status_payload("success", 12)
    ).status == ("processed")
    deployment.refresh_from_db()
    assert deployment.status == "succeeded"


def test_the_most_recent_matching_deployment_is_updated(source, deployment):
    newer = Deployment.objects.create(
        client=deployment.client,
        idempotency_key="k2",
        repository=deployment.repository,
        commit_sha=SHA[:7],
        environment="production",
    )
    handle(source, "deployment_status", status_payload("success", 5))
    newer.refresh_from_db()
    deployment.refresh_from_db()
    assert newer.status == "succeeded"
    assert deployment.status == "queued"


@pytest.mark.parametrize(
    "overrides",
    [
        {"sha": "0" * 40},
        {"environment": "staging"},
    ],
)
def test_no_match_is_processed_with_a_note(source, deployment, overrides):
    result = handle(
        source, "deployment_status", status_payload("success", 5, **overrides)
    )
    assert result.status == "processed"
    assert result.note == "no matching deployment"
    deployment.refresh_from_db()
    assert deployment.status == "queued"


def test_another_repository_does_not_match(source, deployment):
    payload = status_payload("success", 5)
    payload["repository"]["full_name"] = "someone/else"
    assert handle(source, "deployment_status", payload).note == "no matching deployment"


@pytest.mark.parametrize("raw", [b"not json", b"[]", b'{"deployment_status": {}}'])
def test_unusable_bodies_are_permanent_errors(source, raw):
    with pytest.raises(PermanentProcessingError):
        handle(source, "deployment_status", raw)


def test_an_unknown_state_is_a_permanent_error(source, deployment):
    with pytest.raises(PermanentProcessingError):
        handle(source, "deployment_status", status_payload("exploded", 5))


def test_an_event_stored_by_the_real_ingest_view_is_handled(deployment):
    """The inbox row as the signed GitHub ingest stores it is what the handler reads."""
    WebhookSourceFactory(slug="github-live", scheme="github", handler="github")
    raw = json.dumps(status_payload("in_progress", 42)).encode()
    headers = signed_headers(scheme="github", raw_body=raw, event_id="delivery-live")
    headers["X-GitHub-Event"] = "deployment_status"
    response = Client().post(
        "/webhooks/github-live/",
        data=raw,
        content_type="application/json",
        **as_meta(headers),
    )
    assert response.status_code == 202

    event = InboxEvent.objects.get(event_id="delivery-live")
    with transaction.atomic():
        result = github_integration.handle(event)
    assert result.status == "processed"
    deployment.refresh_from_db()
    assert deployment.status == "running"
    assert deployment.last_github_status_id == 42
