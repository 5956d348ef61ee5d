"""The API as an integrator meets it: a client generated from ``/api/schema/`` with
openapi-python-client (pinned in requirements/local.txt), driving a real gunicorn through the
retry story. The generated client raises ``UnexpectedStatus`` on any answer the schema does not
document, so every step below is also a check that the schema documents it."""

from __future__ import annotations

import importlib
import subprocess
import sys
from datetime import timedelta

import pytest
import requests
from django.utils import timezone

from core.actors import Actor
from tests import processes
from trail.api_clients import api_client_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PACKAGE = "inbox_api_client"


@pytest.fixture
def server(tmp_path):
    port = processes.free_port()
    process = processes.gunicorn(
        tmp_path, port=port, workers=2, env={"LOG_LEVEL": "WARNING"}
    ).start()
    try:
        processes.wait_http_ok(f"http://127.0.0.1:{port}/healthz")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.stop()


@pytest.fixture
def generated(server, tmp_path):
    """The package openapi-python-client generates from the live server's schema, imported."""
    schema = requests.get(f"{server}/api/schema/?format=json", timeout=30)
    assert schema.status_code == 200
    (tmp_path / "schema.json").write_text(schema.text)
    # No formatting hooks: the generated code is imported, not read.
    (tmp_path / "config.yml").write_text(
        f"package_name_override: {PACKAGE}\npost_hooks: []\n"
    )
    result = subprocess.run(
        [
            str(processes.BIN / "openapi-python-client"),
            "generate",
            "--path",
            "schema.json",
            "--config",
            "config.yml",
            "--meta",
            "none",
            "--output-path",
            PACKAGE,
            "--fail-on-warning",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def api(generated, name: str):
    """``<package>.api.<tag>.<name>``, the generated module of one operation."""
    tag = name.rsplit("_", 1)[0]
    tag = {
        "idempotency_keys": "idempotency_keys",
        "research_documents": "research",
        "research_documents_revisions": "research",
        "webhooks_events": "webhooks",
    }.get(tag, tag)
    return importlib.import_module(f"{PACKAGE}.api.{tag}.{name}")


def model(generated, name: str):
    return getattr(importlib.import_module(f"{PACKAGE}.models"), name)


def test_the_retry_story_through_a_client_generated_from_the_schema(server, generated):
    _, token = api_client_create(
        name="integrator", token="integrator-token-0123456789", actor=Actor.system()
    )
    client = generated.AuthenticatedClient(
        base_url=server, token=token, raise_on_unexpected_status=True
    )
    create = api(generated, "deployments_create")
    body = model(generated, "DeploymentCreateInput")(
        repository="acme/payment-service",
        commit_sha="abc123def456",
        environment="staging",
        workflow="deploy.yml",
    )

    # Create: 202, the job, its Location.
    first = create.sync_detailed(client=client, body=body, idempotency_key="gen-1")
    assert first.status_code == 202
    deployment = first.parsed
    assert isinstance(deployment, model(generated, "DeploymentOutput"))
    assert deployment.status == "queued"
    location = f"/api/deployments/{deployment.deployment_id}/"
    assert first.headers["Location"] == location

    # The retry with the same key: 200, the same body byte for byte, parsed as the job.
    replay = create.sync_detailed(client=client, body=body, idempotency_key="gen-1")
    assert replay.status_code == 200
    assert replay.content == first.content
    assert isinstance(replay.parsed, model(generated, "DeploymentOutput"))
    assert replay.parsed.to_dict() == deployment.to_dict()
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.headers["Location"] == location

    # The key reused for another operation: 409, naming what differs.
    other = model(generated, "DeploymentCreateInput")(
        repository="acme/payment-service",
        commit_sha="fff123def456",
        environment="staging",
        workflow="deploy.yml",
    )
    reused = create.sync_detailed(client=client, body=other, idempotency_key="gen-1")
    assert reused.status_code == 409
    assert reused.parsed.error == "idempotency_key_reused"
    assert reused.parsed.differing_fields == ["commit_sha"]

    # An invalid body: 422 with details; no key, or a bad one: 400.
    invalid = model(generated, "DeploymentCreateInput")(
        repository="not a repository", commit_sha="xyz", environment="staging"
    )
    refused = create.sync_detailed(client=client, body=invalid, idempotency_key="gen-2")
    assert refused.status_code == 422
    assert refused.parsed.error == "invalid_payload"
    assert set(refused.parsed.details.to_dict()) == {"repository", "commit_sha"}
    keyless = create.sync_detailed(client=client, body=body, idempotency_key="")
    assert keyless.status_code == 400
    assert keyless.parsed.error == "idempotency_key_required"

    # Lookups: the job, the job by its key, the key itself; another id is 404.
    retrieve = api(generated, "deployments_retrieve")
    found = retrieve.sync_detailed(
        client=client, deployment_id=deployment.deployment_id
    )
    assert found.status_code == 200
    assert found.parsed.deployment_id == deployment.deployment_id
    missing = retrieve.sync_detailed(client=client, deployment_id="dep_unknown")
    assert missing.status_code == 404
    assert missing.parsed.error == "not_found"
    listed = api(generated, "deployments_list").sync_detailed(
        client=client, idempotency_key="gen-1"
    )
    assert listed.status_code == 200
    assert [d.deployment_id for d in listed.parsed.results] == [
        deployment.deployment_id
    ]
    forged = api(generated, "deployments_list").sync_detailed(
        client=client, cursor="cD1hYmM="
    )
    assert forged.status_code == 404
    key = api(generated, "idempotency_keys_retrieve").sync_detailed(
        client=client, operation_type="deployment.create", key="gen-1"
    )
    assert key.status_code == 200
    assert key.parsed.resource_id == deployment.deployment_id
    assert key.parsed.status == "processing"

    # Status sync: 201, its replay 200; an unknown target 404.
    sync = api(generated, "status_sync_create")
    report = model(generated, "DeploymentStatusReport")(
        deployment_id=deployment.deployment_id,
        status=model(generated, "StatusEnum")("running"),
        reported_at=timezone.now() + timedelta(seconds=1),
        detail="from the pipeline",
    )
    synced = sync.sync_detailed(client=client, body=report, idempotency_key="sync-1")
    assert synced.status_code == 201
    assert synced.parsed.applied is True
    assert synced.parsed.current_status == "running"
    again = sync.sync_detailed(client=client, body=report, idempotency_key="sync-1")
    assert again.status_code == 200
    assert again.content == synced.content
    assert again.headers["Idempotent-Replayed"] == "true"
    unknown = model(generated, "DeploymentStatusReport")(
        deployment_id="dep_unknown",
        status=model(generated, "StatusEnum")("running"),
        reported_at=timezone.now(),
    )
    lost = sync.sync_detailed(client=client, body=unknown, idempotency_key="sync-2")
    assert lost.status_code == 404
    too_long = model(generated, "DeploymentStatusReport")(
        deployment_id=deployment.deployment_id,
        status=model(generated, "StatusEnum")("running"),
        reported_at=timezone.now(),
        detail="x" * 1001,
    )
    assert (
        sync.sync_detailed(
            client=client, body=too_long, idempotency_key="sync-3"
        ).status_code
        == 422
    )

    # Builds follow the same contract.
    build_create = api(generated, "builds_create")
    build = model(generated, "BuildCreateInput")(
        repository="acme/payment-service", commit_sha="abc123def456", ref="main"
    )
    made = build_create.sync_detailed(client=client, body=build, idempotency_key="b-1")
    assert made.status_code == 202
    remade = build_create.sync_detailed(
        client=client, body=build, idempotency_key="b-1"
    )
    assert remade.status_code == 200
    assert remade.content == made.content
    assert remade.headers["Idempotent-Replayed"] == "true"
    assert remade.headers["Location"] == made.headers["Location"]

    # Without a valid token: 401.
    stranger = generated.AuthenticatedClient(
        base_url=server, token="not-a-token", raise_on_unexpected_status=True
    )
    denied = create.sync_detailed(client=stranger, body=body, idempotency_key="gen-1")
    assert denied.status_code == 401
    assert denied.parsed.error == "unauthorized"
