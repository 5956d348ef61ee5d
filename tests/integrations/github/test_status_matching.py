"""Which deployment a GitHub ``deployment_status`` moves (docs/security.md, "GitHub statuses
and API clients"): the GitHub deployment's own id first (the ``github`` executor records it,
and our id rides in its payload), then the repository, environment and commit for
deployments made elsewhere; never another API client's deployment when the source is bound
to one; a short commit matches one full commit only; a date in the future cannot block the
reports after it."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from deployments.models import Deployment
from integrations.github import integration as github_integration
from tests.core.factories import bearer_http
from tests.deployments.factories import deployment_body, idempotent_post
from tests.integrations.github.factories import (
    GitHubInboxEventFactory,
    deployment_status_payload,
)
from trail.api_clients import api_client_create
from webhooks.models import InboxEvent, WebhookSource
from webhooks.sources import webhook_source_create

pytestmark = pytest.mark.django_db

FULL_SHA = "abc1234" + "0" * 33
OTHER_COMMIT = "abc1234" + "f" * 33  # the same 7-character prefix, another commit


@pytest.fixture
def clients():
    a, token_a = api_client_create(
        actor=Actor.system(), name="client-a", token="test-token-a-0123456789abcdef"
    )
    b, token_b = api_client_create(
        actor=Actor.system(), name="client-b", token="test-token-b-0123456789abcdef"
    )
    return {"a": (a, bearer_http(token_a)), "b": (b, bearer_http(token_b))}


def deploy(http, key: str, **overrides) -> Deployment:
    body = deployment_body(
        repository="acme/shop", commit_sha="abc1234", environment="prod", **overrides
    )
    response = idempotent_post(http, "/api/deployments/", body, key)
    assert response.status_code == 202
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def status_of(
    state: str,
    status_id: int,
    *,
    sha: str = FULL_SHA,
    github_id: int = 7001,
    payload: dict | None = None,
    updated_at: str | None = None,
) -> dict:
    body = deployment_status_payload(
        state,
        status_id,
        sha=sha,
        environment="prod",
        id=github_id,
        payload=payload or {},
    )
    body["repository"]["full_name"] = "acme/shop"
    if updated_at is not None:
        body["deployment_status"]["updated_at"] = updated_at
    return body


def handle(source: WebhookSource, payload: dict):
    event = GitHubInboxEventFactory(
        source=source,
        event_type="deployment_status",
        payload=payload,
        processing_status="processing",
    )
    with transaction.atomic():
        InboxEvent.objects.select_for_update().get(pk=event.pk)
        return github_integration.handle(event)


def source_for(client=None, slug: str = "github-shop") -> WebhookSource:
    source, _ = webhook_source_create(
        actor=Actor.system(),
        slug=slug,
        scheme="github",
        handler="github",
        secret="github-webhook-secret-0123456789",
        client=client,
    )
    return source


def test_a_source_bound_to_a_client_moves_only_that_clients_deployments(clients):
    client_a, http_a = clients["a"]
    _, http_b = clients["b"]
    mine = deploy(http_a, "a-1")
    theirs = deploy(http_b, "b-1")  # the same repository, commit and environment, later

    result = handle(source_for(client_a), status_of("success", 1))

    assert result.note == f"deployment {mine.public_id} succeeded"
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (mine.status, theirs.status) == ("succeeded", "queued")


def test_a_source_bound_to_a_client_without_a_match_moves_nothing(clients):
    client_a, _ = clients["a"]
    _, http_b = clients["b"]
    theirs = deploy(http_b, "b-1")
    result = handle(source_for(client_a), status_of("success", 1))
    assert result.note == "no matching deployment"
    theirs.refresh_from_db()
    assert theirs.status == "queued"


def test_an_unbound_source_keeps_the_single_tenant_rule(clients):
    """Documented: an unbound source moves the most recent matching deployment of any
    client (one tenant, one GitHub)."""
    _, http_a = clients["a"]
    _, http_b = clients["b"]
    first = deploy(http_a, "a-1")
    latest = deploy(http_b, "b-1")
    handle(source_for(), status_of("success", 1))
    first.refresh_from_db()
    latest.refresh_from_db()
    assert (first.status, latest.status) == ("queued", "succeeded")


def test_the_github_deployment_id_decides_first(clients):
    _, http_a = clients["a"]
    _, http_b = clients["b"]
    mine = deploy(http_a, "a-1")
    theirs = deploy(http_b, "b-1")
    Deployment.objects.filter(pk=mine.pk).update(github_deployment_id=111)
    Deployment.objects.filter(pk=theirs.pk).update(github_deployment_id=222)
    handle(source_for(), status_of("success", 1, github_id=111))
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (mine.status, theirs.status) == ("succeeded", "queued")
    # A status of a GitHub deployment that none of ours holds does not fall back onto one
    # that holds another.
    assert handle(
        source_for(slug="gh2"), status_of("failure", 2, github_id=333)
    ).note == ("no matching deployment")


def test_our_id_in_the_payload_decides_and_is_remembered(clients):
    _, http_a = clients["a"]
    _, http_b = clients["b"]
    mine = deploy(http_a, "a-1")
    deploy(http_b, "b-1")
    payload = {"deployment_id": mine.public_id}
    handle(source_for(), status_of("in_progress", 1, github_id=4242, payload=payload))
    mine.refresh_from_db()
    assert (mine.status, mine.github_deployment_id) == ("running", 4242)
    # Its downstream is that GitHub deployment: what carries it, found by the report.
    assert mine.downstream == {"system": "github", "id": 4242, "url": None}


def test_a_short_commit_matches_one_full_commit_only(clients):
    _, http_a = clients["a"]
    mine = deploy(http_a, "a-1")
    source = source_for()
    assert handle(source, status_of("in_progress", 1, sha=FULL_SHA)).note == (
        f"deployment {mine.public_id} running"
    )
    mine.refresh_from_db()
    assert mine.github_commit_sha == FULL_SHA
    # Another commit that happens to share the 7 characters is another deployment's.
    other = handle(source, status_of("failure", 2, sha=OTHER_COMMIT, github_id=7002))
    assert other.note == "no matching deployment"
    assert handle(source, status_of("success", 3, sha=FULL_SHA)).status == "processed"
    mine.refresh_from_db()
    assert mine.status == "succeeded"


def test_a_status_dated_in_the_future_does_not_block_later_reports(clients, settings):
    _, http_a = clients["a"]
    mine = deploy(http_a, "a-1")
    tomorrow = (timezone.now() + timedelta(days=1)).isoformat().replace("+00:00", "Z")
    handle(source_for(), status_of("in_progress", 1, updated_at=tomorrow))
    mine.refresh_from_db()
    tolerance = timedelta(seconds=settings.WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS)
    assert mine.status_changed_at <= timezone.now() + tolerance
    report = {
        "deployment_id": mine.public_id,
        "status": "succeeded",
        "reported_at": (timezone.now() + tolerance).isoformat(),
    }
    synced = idempotent_post(http_a, "/api/status-sync/", report, "sync-1")
    assert synced.json()["applied"] is True


def test_the_command_binds_a_source_to_a_client(clients):
    out = io.StringIO()
    call_command(
        "webhook_source",
        "create",
        "gh-a",
        "--scheme",
        "github",
        "--handler",
        "github",
        "--client",
        "client-a",
        stdout=out,
    )
    assert WebhookSource.objects.get(slug="gh-a").client.name == "client-a"
    assert "client client-a" in out.getvalue()
    with pytest.raises(CommandError, match="no API client 'nobody'"):
        call_command(
            "webhook_source",
            "create",
            "gh-b",
            "--scheme",
            "github",
            "--handler",
            "github",
            "--client",
            "nobody",
            stdout=io.StringIO(),
        )
    assert not WebhookSource.objects.filter(slug="gh-b").exists()
