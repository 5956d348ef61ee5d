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

from django.apps import apps
from django.core.management.color import no_style
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from core.actors import Actor
from deployments.models import Build, Deployment
from deployments.services import job_run
from research.models import DocumentRevision, ResearchDocument
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import build_body, deployment_body, idempotent_post
from tests.deployments.receiver import Receiver
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import conflicting_body, research_source, signed_post
from webhooks.models import InboxEvent, OperatorAction, WebhookSource
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


@dataclass
class _Snapshot:
    """The rows a sealed trail left, table by table (PostgreSQL's binary ``COPY``), and
    what the ``Trail`` names, by primary key."""

    tables: list[tuple[str, bytes]]
    pks: dict[str, int]
    body: dict


_SNAPSHOTS: dict[str, _Snapshot] = {}


def _row_counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        counts = {}
        for table in connection.introspection.django_table_names(only_existing=True):
            cursor.execute(f'SELECT count(*) FROM "{table}"')  # noqa: S608
            counts[table] = cursor.fetchone()[0]
        return counts


def _trail_of(pks: dict[str, int], body: dict) -> Trail:
    event = InboxEvent.objects.get(pk=pks["event"])
    revision = DocumentRevision.objects.get(pk=pks["revision"])
    return Trail(
        source=WebhookSource.objects.get(pk=pks["source"]),
        event=event,
        document=revision.document,
        revision=revision,
        deployment=Deployment.objects.get(pk=pks["deployment"]),
        build=Build.objects.get(pk=pks["build"]),
        rotation=OperatorAction.objects.get(pk=pks["rotation"]),
        body=body,
    )


def sealed_trail(settings) -> Trail:
    """``every_ledger``, sealed and signed in a checkpoint: what most tests of the log start
    from. Made through the product's paths by the first test of a process that asks for it;
    the others (on tables a flush emptied) get the same rows back from a binary copy of
    them, in a few milliseconds instead of a second, and the sequences set past them."""
    settings.DEPLOY_SIMULATED_SECONDS = 0
    snapshot = _SNAPSHOTS.get(connection.settings_dict["NAME"])
    if snapshot is None:
        before = _row_counts()
        trail = every_ledger(settings)
        seal_all()
        from audit.checkpoints import checkpoint_make

        checkpoint_make()
        filled = [
            table
            for table, count in _row_counts().items()
            if count and not before.get(table)
        ]
        raw = connection.connection
        tables = []
        with raw.cursor() as cursor:
            for table in filled:
                with cursor.copy(f'COPY "{table}" TO STDOUT (FORMAT BINARY)') as copy:
                    tables.append((table, b"".join(bytes(chunk) for chunk in copy)))
        _SNAPSHOTS[connection.settings_dict["NAME"]] = _Snapshot(
            tables=tables,
            pks={
                "source": trail.source.pk,
                "event": trail.event.pk,
                "revision": trail.revision.pk,
                "deployment": trail.deployment.pk,
                "build": trail.build.pk,
                "rotation": trail.rotation.pk,
            },
            body=trail.body,
        )
        return trail
    connection.ensure_connection()
    with transaction.atomic(), connection.connection.cursor() as cursor:
        for table, data in snapshot.tables:
            cursor.execute(f'SELECT 1 FROM "{table}" LIMIT 1')  # noqa: S608
            assert cursor.fetchone() is None, f"{table} is not empty: no trail restored"
            with cursor.copy(f'COPY "{table}" FROM STDIN (FORMAT BINARY)') as copy:
                copy.write(data)
        for statement in connection.ops.sequence_reset_sql(
            no_style(), apps.get_models()
        ):
            cursor.execute(statement)
    return _trail_of(snapshot.pks, snapshot.body)


def seal_all():
    """A sealing round once the horizon has passed every row made so far."""
    from audit.sealer import ledger_rows_seal

    return ledger_rows_seal(now=timezone.now() + timedelta(minutes=5))
