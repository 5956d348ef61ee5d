"""The GitHub handler, fed inbox rows stored from GitHub's real payloads."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from core.errors import PermanentProcessingError
from deployments.models import Deployment, JobTransition
from integrations.github import integration as github_integration
from tests.deployments.factories import DeploymentFactory
from tests.integrations.fixtures import fixture_json
from tests.integrations.github.factories import (
    GitHubInboxEventFactory,
    deployment_status_payload,
    github_headers,
    github_source_create,
)
from tests.webhooks.factories import encode, webhook_post
from webhooks.models import InboxEvent

pytestmark = pytest.mark.django_db

SHA = "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"


@pytest.fixture
def deployment(db):
    return DeploymentFactory(
        repository="codertocat/hello-world",
        commit_sha=SHA[:12],
        environment="production",
    )


def handle(source, event_type: str, payload: dict | bytes):
    event = GitHubInboxEventFactory(
        source=source,
        event_type=event_type,
        payload=payload,
        processing_status="processing",
    )
    with transaction.atomic():
        InboxEvent.objects.select_for_update().get(pk=event.pk)
        return github_integration.handle(event)


def test_ping_is_processed_as_a_no_op(github_source):
    assert (
        handle(github_source, "ping", fixture_json("github", "ping__basic")).status
        == "processed"
    )


def test_other_events_are_unsupported(github_source, deployment):
    result = handle(
        github_source, "deployment", fixture_json("github", "deployment__created")
    )
    assert result.status == "ignored_unsupported"
    deployment.refresh_from_db()
    assert deployment.status == "queued"


def test_the_real_success_payload_succeeds_the_matching_deployment(
    github_source, deployment
):
    result = handle(
        github_source,
        "deployment_status",
        fixture_json("github", "deployment_status__basic"),
    )
    assert result.status == "processed"
    deployment.refresh_from_db()
    assert deployment.status == "succeeded"
    assert deployment.last_github_status_id == 209916254
    transition = JobTransition.objects.get(job=deployment)
    assert transition.to_status == "succeeded"
    assert transition.actor.startswith("github:")


def test_the_installation_variant_is_handled_too(github_source, deployment):
    payload = fixture_json("github", "deployment_status__with-installation")
    assert handle(github_source, "deployment_status", payload).status == "processed"
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
def test_state_mapping(github_source, deployment, state, status):
    handle(
        github_source, "deployment_status", deployment_status_payload("in_progress", 1)
    )
    assert handle(
        github_source, "deployment_status", deployment_status_payload(state, 2)
    ).status == ("processed")
    deployment.refresh_from_db()
    assert deployment.status == status


def test_an_in_progress_status_gives_the_deployment_a_lease(
    github_source, deployment, settings
):
    """Reported running by GitHub as by status-sync: the relay's sweep fails the deployment if
    nothing more is reported within the lease (tests/deployments/test_progress_deadline.py)."""
    settings.DEPLOY_RUNNING_LEASE_SECONDS = 120
    before = timezone.now()
    handle(
        github_source, "deployment_status", deployment_status_payload("in_progress", 1)
    )
    deployment.refresh_from_db()
    assert deployment.status == "running"
    lease = timedelta(seconds=120)
    assert before + lease <= deployment.lease_expires_at <= timezone.now() + lease


def test_an_older_status_id_is_ignored_out_of_order(github_source, deployment):
    handle(
        github_source, "deployment_status", deployment_status_payload("in_progress", 10)
    )
    result = handle(
        github_source, "deployment_status", deployment_status_payload("queued", 9)
    )
    assert result.status == "ignored_out_of_order"
    same = handle(
        github_source, "deployment_status", deployment_status_payload("success", 10)
    )
    assert same.status == "ignored_out_of_order"
    deployment.refresh_from_db()
    assert deployment.status == "running"
    assert deployment.last_github_status_id == 10


def test_a_non_terminal_never_replaces_a_terminal(github_source, deployment):
    handle(github_source, "deployment_status", deployment_status_payload("failure", 10))
    result = handle(
        github_source, "deployment_status", deployment_status_payload("in_progress", 11)
    )
    assert result.status == "ignored_out_of_order"
    deployment.refresh_from_db()
    assert deployment.status == "failed"
    # a newer terminal status does replace it
    assert handle(
        github_source, "deployment_status", deployment_status_payload("success", 12)
    ).status == ("processed")
    deployment.refresh_from_db()
    assert deployment.status == "succeeded"


def test_the_most_recent_matching_deployment_is_updated(github_source, deployment):
    newer = Deployment.objects.create(
        client=deployment.client,
        idempotency_key="k2",
        repository=deployment.repository,
        commit_sha=SHA[:7],
        environment="production",
    )
    handle(github_source, "deployment_status", deployment_status_payload("success", 5))
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
def test_no_match_is_processed_with_a_note(github_source, deployment, overrides):
    result = handle(
        github_source,
        "deployment_status",
        deployment_status_payload("success", 5, **overrides),
    )
    assert result.status == "processed"
    assert result.note == "no matching deployment"
    deployment.refresh_from_db()
    assert deployment.status == "queued"


def test_another_repository_does_not_match(github_source, deployment):
    payload = deployment_status_payload("success", 5)
    payload["repository"]["full_name"] = "someone/else"
    assert (
        handle(github_source, "deployment_status", payload).note
        == "no matching deployment"
    )


@pytest.mark.parametrize("raw", [b"not json", b"[]", b'{"deployment_status": {}}'])
def test_unusable_bodies_are_permanent_errors(github_source, raw):
    with pytest.raises(PermanentProcessingError):
        handle(github_source, "deployment_status", raw)


def test_an_unknown_state_is_a_permanent_error(github_source, deployment):
    with pytest.raises(PermanentProcessingError):
        handle(
            github_source, "deployment_status", deployment_status_payload("exploded", 5)
        )


def test_an_event_stored_by_the_real_ingest_view_is_handled(client, deployment):
    """The inbox row as the signed GitHub ingest stores it is what the handler reads."""
    github_source_create("github-live")
    raw = encode(deployment_status_payload("in_progress", 42))
    headers = github_headers(raw, event="deployment_status", delivery="delivery-live")
    response = webhook_post(client, "github-live", raw, headers)
    assert response.status_code == 202

    event = InboxEvent.objects.get(event_id="delivery-live")
    with transaction.atomic():
        result = github_integration.handle(event)
    assert result.status == "processed"
    deployment.refresh_from_db()
    assert deployment.status == "running"
    assert deployment.last_github_status_id == 42
