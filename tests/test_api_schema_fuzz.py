"""schemathesis against /api/schema/ of a real gunicorn, with real Bearer authentication: no
server error, and no response that contradicts the published schema."""

import subprocess

import pytest

from core.actors import Actor
from core.services import api_client_create
from tests import processes

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_headers_conformance",
        "response_schema_conformance",
    ]
)


def test_schemathesis_finds_no_server_error_and_no_schema_violation(tmp_path):
    _, token = api_client_create(
        name="schemathesis", token="schemathesis-token-0123456789", actor=Actor.system()
    )
    port = processes.free_port()
    server = processes.gunicorn(
        tmp_path,
        port=port,
        workers=2,
        env={"CELERY_BROKER_URL": "redis://127.0.0.1:1/0", "LOG_LEVEL": "WARNING"},
    ).start()
    try:
        processes.wait_http_ok(f"http://127.0.0.1:{port}/healthz")
        result = subprocess.run(
            [
                str(processes.BIN / "schemathesis"),
                "run",
                f"http://127.0.0.1:{port}/api/schema/",
                "--header",
                f"Authorization: Bearer {token}",
                "--checks",
                CHECKS,
                "--max-examples",
                "25",
                "--seed",
                "20261130",
                "--workers",
                "2",
                "--no-color",
                "--generation-database",
                "none",
                "--request-timeout",
                "20",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        server.stop()
    output = result.stdout + result.stderr
    (tmp_path.parent / "schemathesis.log").write_text(output)
    assert result.returncode == 0, output[-8000:]
    assert "passed" in output.lower()
