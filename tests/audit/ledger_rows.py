"""One record of every ledger the log takes in, made through the product's own paths: a
signed delivery through the webhook view, its processing by the research handler (an attempt
and a revision), a conflicting delivery (mismatch evidence), a deployment and a build through
the API with their transitions (the deployment run by the worker's service on the simulated
executor, the build triggered through the ``http`` executor to a real receiver: a trigger
attempt) and a status sync, and operator actions (an API client's creation, a secret
rotation)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from core.actors import Actor
from deployments.models import Build, Deployment
from deployments.services.attempts import job_run
from research.models import DocumentRevision, ResearchDocument
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import build_body, deployment_body, idempotent_post
from tests.deployments.receiver import Receiver
from tests.integrations.research.factories import research_event
from tests.snapshots import rows_snapshot
from tests.webhooks.factories import conflicting_body, research_source, signed_post
from trail.models import OperatorAction
from webhooks.models import InboxEvent, WebhookSource
from webhooks.processing import inbox_event_process
from webhooks.sources import webhook_source_rotate


@dataclass
class Trail:
    source: WebhookSource
    event: InboxEvent
    document: ResearchDocument
    revision: DocumentRevision
    deployment: Deployment
    build: Build
    rotation: OperatorAction
    body: dict


def every_ledger(settings) -> Trail:
    settings.DEPLOY_SIMULATED_SECONDS = 0
    source = research_source()
    http = Client()
    body = research_event()
    assert signed_post(http, source.slug, body).status_code == 202
    event = InboxEvent.objects.get(source=source, event_id=body["event_id"])
    inbox_event_process(inbox_event_id=event.pk, worker="worker-1")
    assert signed_post(http, source.slug, conflicting_body(event)).status_code == 409
    event.refresh_from_db()
    revision = DocumentRevision.objects.get(inbox_event=event)

    _, token = api_client_make(name="ci")
    api = bearer_http(token)
    answer = idempotent_post(api, "/api/deployments/", deployment_body(), key="dep-1")
    deployment = Deployment.objects.get(public_id=answer.json()["deployment_id"])
    job_run(kind="deployment", public_id=deployment.public_id, worker="worker-1")
    answer = api.post(
        "/api/status-sync/",
        data=json.dumps(
            {
                "deployment_id": deployment.public_id,
                "status": "failed",
                "reported_at": (timezone.now() + timedelta(seconds=1)).isoformat(),
                "detail": "rolled back",
            }
        ),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="sync-1",
    )
    assert answer.status_code == 201, answer.content
    answer = idempotent_post(api, "/api/builds/", build_body(), key="bld-1")
    build = Build.objects.get(public_id=answer.json()["build_id"])
    with Receiver() as receiving:
        settings.DEPLOY_EXECUTOR = "http"
        settings.DEPLOY_HTTP_URL = receiving.url
        settings.DEPLOY_HTTP_SECRET = receiving.secret
        assert job_run(kind="build", public_id=build.public_id, worker="worker-1") == (
            "triggered"
        )
    settings.DEPLOY_EXECUTOR = "simulated"
    build.refresh_from_db()

    webhook_source_rotate(source=source, actor=Actor.system(), reason="yearly")
    rotation = OperatorAction.objects.get(action="rotate_secret")
    deployment.refresh_from_db()
    return Trail(
        source=source,
        event=event,
        document=revision.document,
        revision=revision,
        deployment=deployment,
        build=build,
        rotation=rotation,
        body=body,
    )


def sealed_trail(settings) -> Trail:
    """``every_ledger``, sealed and signed in a checkpoint: what most tests of the log start
    from. Made through the product's paths by the first test of a process that asks for it;
    the others (on tables a flush emptied) get the same rows back from a binary copy of
    them, in a few milliseconds instead of a second (tests/snapshots.py)."""
    settings.DEPLOY_SIMULATED_SECONDS = 0

    def build() -> Trail:
        trail = every_ledger(settings)
        seal_all()
        from audit.checkpoints import checkpoint_make

        checkpoint_make()
        return trail

    return rows_snapshot("a sealed trail", build)


def seal_all():
    """A sealing round once the horizon has passed every row made so far."""
    from audit.sealer import ledger_rows_seal

    return ledger_rows_seal(now=timezone.now() + timedelta(minutes=5))
