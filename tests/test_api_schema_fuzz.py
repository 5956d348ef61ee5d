"""schemathesis against ``/api/schema/`` of a real gunicorn (docs/http-api.md, "Fuzzing the
API"), as tests/fuzz/schemathesis.toml configures it: every check (``--checks all``), every
phase (coverage, fuzzing, and the stateful phase, which follows the schema's links from a
new job to reading it and reporting its status), webhook deliveries signed with their
source's secret (tests/fuzz/hooks.py), two API clients neither of which may read the
other's jobs, a fixed seed and a bounded number of examples. Any finding fails the test;
the report says which request found it and how to send it again."""

from __future__ import annotations

import collections
import json
import subprocess

import pytest

from core.actors import Actor
from tests import processes
from tests.webhooks.factories import WebhookSourceFactory
from trail.api_clients import api_client_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SOURCE = "fuzz-research"
SOURCE_SECRET = "fuzz-source-secret-0123456789abcdef"
CLIENTS = {
    "client-a": "fuzz-client-a-token-0123456789abcdef",
    "client-b": "fuzz-client-b-token-0123456789abcdef",
}
# The operator API's client, last in the auth file: schemathesis moves an operation the CI
# clients are refused (403) on to the next identity, the operator API's to it.
OPERATOR = ("operator", "fuzz-operator-token-0123456789abcdef")
OPS_SOURCE = "fuzz-ops"


def interactions(ndjson: str) -> list[tuple[dict, dict | None, dict | None]]:
    """Every request of the run (case, response, the case it followed in a stateful
    scenario), from schemathesis's event stream."""
    found = []
    for line in ndjson.splitlines():
        event = json.loads(line)
        recorder = (event.get("ScenarioFinished") or {}).get("recorder") or {}
        cases = recorder.get("cases") or {}
        sent = recorder.get("interactions") or {}
        for case_id, case in cases.items():
            parent = cases.get(case.get("parent_id") or "")
            found.append(
                (
                    case["value"],
                    (sent.get(case_id) or {}).get("response"),
                    parent["value"]
                    if parent and case["is_transition_applied"]
                    else None,
                )
            )
    return found


def test_schemathesis_finds_nothing(tmp_path):
    for name, token in CLIENTS.items():
        api_client_create(name=name, token=token, actor=Actor.system())
    api_client_create(
        name=OPERATOR[0], token=OPERATOR[1], actor=Actor.system(), role="operator"
    )
    WebhookSourceFactory(
        slug=SOURCE, scheme="hmac-sha256", handler="research", secret=SOURCE_SECRET
    )
    WebhookSourceFactory(slug=OPS_SOURCE, scheme="hmac-sha256", handler="research")
    auth = tmp_path / "auth.json"
    auth.write_text(
        json.dumps(
            {
                "auth": [
                    {
                        "name": name,
                        "fixedHeaders": [
                            {"name": "Authorization", "value": f"Bearer {token}"}
                        ],
                    }
                    for name, token in [*CLIENTS.items(), OPERATOR]
                ]
            }
        )
    )
    port = processes.free_port()
    server = processes.gunicorn(
        tmp_path,
        port=port,
        workers=2,
        env={"CELERY_BROKER_URL": "redis://127.0.0.1:1/0", "LOG_LEVEL": "WARNING"},
    ).start()
    reports = tmp_path / "reports"
    try:
        processes.wait_http_ok(f"http://127.0.0.1:{port}/healthz")
        result = subprocess.run(
            [
                str(processes.BIN / "schemathesis"),
                "--config-file",
                str(processes.ROOT / "tests" / "fuzz" / "schemathesis.toml"),
                "run",
                f"http://127.0.0.1:{port}/api/schema/?format=json",
                "--checks",
                "all",
                "--no-color",
                "--report",
                "json,ndjson",
                "--report-dir",
                str(reports),
            ],
            cwd=processes.ROOT,
            env={
                **processes.child_env(),
                "RETRYSAFE_FUZZ_AUTH_FILE": str(auth),
                "RETRYSAFE_FUZZ_SOURCE": SOURCE,
                "RETRYSAFE_FUZZ_SOURCE_SECRET": SOURCE_SECRET,
                "RETRYSAFE_FUZZ_OPS_SOURCE": OPS_SOURCE,
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.stop()
    output = result.stdout + result.stderr
    (tmp_path / "schemathesis.log").write_text(output)
    assert result.returncode == 0, output[-12000:]
    [summary] = [json.loads(path.read_text()) for path in reports.glob("*.json")]
    assert summary["failures"] == [] and summary["errors"] == [], output[-12000:]
    assert summary["operations"]["tested"] == summary["operations"]["total"]
    for phase in ("coverage", "fuzzing", "stateful"):
        assert summary["phases"][phase]["status"] == "success", phase

    [events] = [path.read_text() for path in reports.glob("*.ndjson")]
    sent = interactions(events)
    statuses = collections.Counter(
        (case["method"], case["path"], response["status_code"] if response else None)
        for case, response, _ in sent
    )
    # Signed deliveries got past the signature: new events were stored.
    assert statuses["POST", "/webhooks/{slug}/", 202], statuses
    # The stateful phase followed the links: create, then read and report a status.
    followed = collections.Counter(
        (parent["method"], parent["path"], case["method"], case["path"])
        for case, _, parent in sent
        if parent is not None
    )
    create = ("POST", "/api/deployments/")
    assert followed[(*create, "GET", "/api/deployments/{deployment_id}/")], followed
    assert followed[(*create, "POST", "/api/status-sync/")], followed
    # The second client asked for the first's jobs by their ids, and never got one.
    probes = [
        response["status_code"]
        for case, response, _ in sent
        if case.get("auth_identity") == "client-b"
        and case["path"]
        in ("/api/deployments/{deployment_id}/", "/api/builds/{build_id}/")
        and response is not None
    ]
    assert probes and all(status == 404 for status in probes), probes
    # The operator API was fuzzed as the operator, past its role check: reads and actions
    # answered with success, not only refused.
    answered = {
        (method, path)
        for method, path, status in statuses
        if path.startswith("/api/ops/") and status is not None and status < 300
    }
    assert ("GET", "/api/ops/sources/") in answered, answered
    assert any(method == "POST" for method, _ in answered), answered
