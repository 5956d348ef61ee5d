"""The README's first steps on the embedded default (SQLite, filesystem broker): the demo data,
a web and a worker process, ``send_test_webhook``, and the event processed by the research
handler, as a newcomer sees it through the API; then the README's blocks as printed, and
docs/sources.md's for a producer that signs with Ed25519 (``v1a``)."""

import re
import subprocess
from pathlib import Path

import pytest
import requests

from tests.processes import (
    BIN,
    LOCAL_SETTINGS,
    Process,
    embedded_env,
    free_port,
    manage,
    wait_http_ok,
    wait_until,
)

pytestmark = pytest.mark.slow

DEMO_TOKEN = "demo-api-token-change-me"
DEMO_SECRET = "demo-webhook-secret-change-me"


def test_a_signed_demo_event_is_processed_on_sqlite(tmp_path):
    port = free_port()
    env = embedded_env(tmp_path, port)
    manage("migrate", "--noinput", env=env, check=True)
    manage("demo_setup", env=env, check=True)
    # The web and worker processes of the Procfile, each started alone.
    web = Process(
        [str(BIN / "gunicorn"), "config.wsgi", "--bind", f"127.0.0.1:{port}"],
        env | LOCAL_SETTINGS,
        tmp_path / "web.log",
    ).start()
    worker = Process(
        [str(BIN / "celery"), "-A", "config", "worker", "--concurrency", "1"],
        env | LOCAL_SETTINGS | {"CELERY_METRICS_PORT": "0"},
        tmp_path / "worker.log",
    ).start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http_ok(f"{url}/readyz", timeout=60)
        sent = manage(
            "send_test_webhook",
            "--url",
            url,
            "--source",
            "demo",
            "--secret",
            DEMO_SECRET,
            "--event-id",
            "evt_readme_1",
            env=env,
            check=True,
        )
        assert "-> 202" in sent.stdout

        def event_status():
            response = requests.get(
                f"{url}/api/webhooks/demo/events/evt_readme_1/",
                headers={"Authorization": f"Bearer {DEMO_TOKEN}"},
                timeout=5,
            )
            assert response.status_code == 200, response.text
            return response.json()["processing_status"]

        try:
            wait_until(lambda: event_status() == "processed", timeout=60)
        except AssertionError:
            raise AssertionError(worker.log()[-3000:]) from None
        document = requests.get(
            f"{url}/api/research/documents/doc-demo-1/",
            headers={"Authorization": f"Bearer {DEMO_TOKEN}"},
            timeout=5,
        )
        assert document.status_code == 200
        assert document.json()["last_event_id"] == "evt_readme_1"

        # The README's curl examples, as printed (on this test's port).
        event_out = doc_block_run("X-Webhook-Signature", port)
        answers = [line for line in event_out.splitlines() if " HTTP " in line]
        assert [line.rsplit(" HTTP ", 1)[1] for line in answers] == ["202", "200"]
        assert '"status": "accepted"' in answers[0], event_out
        assert '"status": "duplicate"' in answers[1], event_out
        shown = event_out.splitlines()[-1]
        assert '"processing_status":"processed"' in shown.replace(" ", ""), event_out

        deploy_out = doc_block_run("Idempotency-Key", port)
        answers = [line for line in deploy_out.splitlines() if " HTTP " in line]
        assert [line.rsplit(" HTTP ", 1)[1] for line in answers] == [
            "202",
            "200",
            "409",
        ]
        # The retry is the first answer byte for byte.
        assert answers[0].rsplit(" HTTP ", 1)[0] == answers[1].rsplit(" HTTP ", 1)[0]
        assert re.search(r'"deployment_id": ?"dep_', answers[0]), deploy_out
        assert "idempotency_key_reused" in answers[2], deploy_out

        # A producer that signs with Ed25519 (docs/sources.md): the demo pair of
        # webhook_keygen through send_test_webhook, then a key of OpenSSL's own by hand.
        keygen_out = doc_block_run(
            "webhook_keygen", port, env=env, curl=False, doc=SOURCES_DOC
        )
        assert "-> 202" in keygen_out, keygen_out
        assert "whsk_" not in keygen_out  # the private key went to its file only
        v1a_out = doc_block_run(
            "webhook-signature: v1a", port, env=env, doc=SOURCES_DOC
        )
        answers = [line for line in v1a_out.splitlines() if " HTTP " in line]
        assert [line.rsplit(" HTTP ", 1)[1] for line in answers] == ["202", "200"]
        assert '"status": "accepted"' in answers[0], v1a_out
        assert '"status": "duplicate"' in answers[1], v1a_out
        shown = v1a_out.splitlines()[-1]
        assert '"processing_status":"processed"' in shown.replace(" ", ""), v1a_out
    finally:
        web.stop()
        worker.stop()


ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SOURCES_DOC = ROOT / "docs" / "sources.md"


def doc_block_run(
    marker: str,
    port: int,
    *,
    env: dict[str, str] | None = None,
    curl: bool = True,
    doc: Path = README,
) -> str:
    """Runs the ``sh`` block of ``doc`` (the README unless named) that names ``marker`` (and
    curl, unless ``curl`` is false) with bash at the repository's root, against the server
    on ``port`` instead of 8000, and returns what it printed. ``env``: the environment of
    its commands (the server's own, for a block that runs ``manage.py`` on its database)."""
    blocks = re.findall(r"```sh\n(.*?)```", doc.read_text(), flags=re.S)
    [block] = [
        block for block in blocks if marker in block and ("curl" in block or not curl)
    ]
    script = block.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
