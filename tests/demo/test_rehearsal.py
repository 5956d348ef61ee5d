"""docs/console.md's rehearsal of a failure that a replay fixes, run as printed: the embedded
default as ``INBOX_MAX_ATTEMPTS=3 make run`` starts it (migrate, ``demo_setup``, the
Procfile's web, worker and beat on SQLite and a filesystem broker), then the document's shell
block against it: the demo's search index switched down, an event dead-lettered, the index
back up, the event replayed and processed."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.processes import ROOT, embedded_env, free_port, manage, wait_until

pytestmark = pytest.mark.slow

CONSOLE_DOC = ROOT / "docs" / "console.md"


def rehearsal_block() -> str:
    """The ``sh`` block of the doc's rehearsal (the one that switches the index down)."""
    blocks = re.findall(r"```sh\n(.*?)```", CONSOLE_DOC.read_text(), flags=re.S)
    [block] = [block for block in blocks if "demo_dependency down" in block]
    return block


def test_the_rehearsal_runs_as_printed_against_make_run(tmp_path):
    port = free_port()
    env = embedded_env(tmp_path, port) | {
        "INBOX_MAX_ATTEMPTS": "3",  # as the doc starts it
        "CELERY_METRICS_PORT": "0",
    }
    manage("migrate", "--noinput", env=env, check=True)
    setup = manage("demo_setup", env=env, check=True)
    assert "demo rehearsal source" in setup.stdout
    log = open(tmp_path / "honcho.log", "wb")  # noqa: SIM115
    honcho = subprocess.Popen(
        [str(Path(sys.executable).parent / "honcho"), "start", "-f", "Procfile"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:

        def ready():
            try:
                return requests.get(
                    f"http://127.0.0.1:{port}/readyz", timeout=2
                ).status_code
            except requests.RequestException:
                return None

        wait_until(lambda: ready() == 200, timeout=90, what="/readyz to answer 200")
        script = rehearsal_block().replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=ROOT,
            env=env,
        )
        output = (tmp_path / "honcho.log").read_text(errors="replace")
        assert done.returncode == 0, done.stdout + done.stderr + output[-3000:]
    finally:
        os.killpg(honcho.pid, signal.SIGINT)
        try:
            honcho.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait()
        log.close()

    statuses = [
        line
        for line in done.stdout.splitlines()
        if line in ("dead_lettered", "processed")
    ]
    assert statuses == ["dead_lettered", "processed"], done.stdout
    assert "-> 202" in done.stdout
    # The trail: the two switches and the replay, each an operator action; the event's
    # attempts: three that failed on the index, then the replay's that succeeded.
    db = sqlite3.connect(tmp_path / "db.sqlite3")
    actions = [
        row[0]
        for row in db.execute(
            "SELECT action FROM webhooks_operatoraction WHERE action IN "
            "('switch_dependency', 'bulk_replay', 'start_bulk_replay') ORDER BY id"
        )
    ]
    assert actions == [
        "switch_dependency",
        "switch_dependency",
        "start_bulk_replay",
        "bulk_replay",
    ]
    outcomes = [
        (outcome, error.split(":")[0])
        for outcome, error in db.execute(
            "SELECT a.outcome, a.error FROM webhooks_inboxattempt a "
            "JOIN webhooks_inboxevent e ON e.id = a.event_id "
            "WHERE e.event_id LIKE 'evt_rehearsal_%' ORDER BY a.id"
        )
    ]
    assert outcomes == [
        ("retry", "DependencyDown"),
        ("retry", "DependencyDown"),
        ("dead_lettered", "DependencyDown"),
        ("succeeded", ""),
    ], outcomes
    (revisions,) = db.execute(
        "SELECT count(*) FROM research_documentrevision r JOIN research_researchdocument d "
        "ON d.id = r.document_id WHERE d.entity_id = 'doc-rehearsal-1'"
    ).fetchone()
    assert revisions == 1
