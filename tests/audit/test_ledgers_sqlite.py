"""The ledgers enter the log on the embedded default too (SQLite, ``make run``'s settings),
where rows carry no ticket and the sealer takes them by id: sealing, ``audit_verify`` naming
an altered row, and an evidence bundle that verifies offline; in a process of its own with no
environment but a folder."""

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT, manage

pytestmark = pytest.mark.slow

SCRIPT = """
import json
from datetime import timedelta
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from audit.checkpoints import checkpoint_make, log_verifier_key
from audit.sealer import ledger_rows_seal
from audit.stories import evidence_bundle
from audit.verification import log_verify
from core.actors import Actor
from webhooks.envelopes import raw_fingerprint
from webhooks.models import InboxEvent, WebhookSource
from webhooks.sources import webhook_source_create
source, _ = webhook_source_create(
    slug="papers", scheme="hmac-sha256", handler="research",
    secret="sqlite-secret-0123456789abcdef", actor=Actor.system(),
)
old = timezone.now() - timedelta(minutes=10)
events = []
for n in range(5):
    body = json.dumps({"event_id": f"evt-{n}"}).encode()
    events.append(InboxEvent.objects.create(
        source=source, event_id=f"evt-{n}", event_type="research.document.updated",
        payload_hash=raw_fingerprint(body), content_fingerprint="c" * 64,
        raw_body=body, received_at=old,
    ))
report = ledger_rows_seal()
checkpoint_make()
clean = log_verify()
bundle = evidence_bundle(subject="inbox_event", pk=events[2].pk)
with connection.cursor() as cursor:
    cursor.execute("UPDATE webhooks_inboxevent SET event_type = 'x' WHERE id = %s",
                   [events[1].pk])
print(json.dumps({
    "tickets": list(InboxEvent.objects.values_list("log_ticket", flat=True)),
    "appended": report.appended,
    "clean": clean.problems,
    "altered": log_verify().problems,
    "altered_pk": events[1].pk,
    "bundle": bundle,
    "key": log_verifier_key(),
}))
"""


def test_the_ledgers_enter_the_log_on_the_embedded_sqlite_default(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "APP_VAR_DIR": str(tmp_path),
    }
    manage("migrate", "--noinput", "-v", "0", env=env, check=True)
    result = manage("shell", "-c", SCRIPT, env=env, check=True)
    out = json.loads(result.stdout.strip().splitlines()[-1])

    assert out["tickets"] == [None] * 5  # SQLite: taken by id
    assert out["appended"] == {"audit_chain_retired": 1, "inbox_event": 5}
    assert out["clean"] == []
    [problem] = out["altered"]
    assert problem.startswith(f"ALTERED inbox event {out['altered_pk']} (log index 2)")
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(out["bundle"]))
    verified = subprocess.run(
        [sys.executable, "-m", "audit.verify_bundle", str(path), "--key", out["key"]],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "bundle OK: 1 entry verified" in verified.stdout
    audit_verify = manage("audit_verify", env=env)
    assert audit_verify.returncode == 1
    assert f"ALTERED inbox event {out['altered_pk']}" in audit_verify.stderr
