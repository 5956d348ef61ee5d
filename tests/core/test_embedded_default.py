"""The embedded default as a newcomer runs it: the README's Procfile (web + worker + beat) on a
fresh SQLite file and a filesystem broker, no PostgreSQL or Redis involved."""

import os
import signal
import subprocess
import sys

import pytest
import requests

from tests.processes import ROOT, embedded_env, free_port, manage, wait_until

pytestmark = pytest.mark.slow


def test_procfile_runs_web_worker_and_beat_on_sqlite_and_a_filesystem_broker(tmp_path):
    port = free_port()
    env = embedded_env(tmp_path, port)
    # The worker serves its metrics, on 9808 unless told otherwise: here on a port of the
    # test's own, since other workers may run on this machine.
    metrics_port = free_port()
    env["CELERY_METRICS_PORT"] = str(metrics_port)
    python = sys.executable
    manage("migrate", "--noinput", env=env, check=True)
    ping_seen: list[subprocess.CompletedProcess] = []
    log = open(tmp_path / "honcho.log", "wb")  # noqa: SIM115
    honcho = subprocess.Popen(
        [os.path.join(os.path.dirname(python), "honcho"), "start", "-f", "Procfile"],
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
        body = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json()
        assert body["checks"] == {"database": True, "broker": True}

        ping = manage("worker_ping", "--timeout", "60", env=env, check=True)
        ping_seen.append(ping)
        assert "answered" in ping.stdout
        worker_metrics = requests.get(
            f"http://127.0.0.1:{metrics_port}/metrics", timeout=5
        )
        assert worker_metrics.status_code == 200
        assert "dead_letter_total" in worker_metrics.text
        assert (tmp_path / "db.sqlite3").exists()
        assert (tmp_path / "broker" / "queue").is_dir()
    finally:
        # Ctrl-C, as the README says: honcho stops all three processes.
        os.killpg(honcho.pid, signal.SIGINT)
        try:
            honcho.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait()
        log.close()
    output = (tmp_path / "honcho.log").read_text(errors="replace")
    for process in ("web", "worker", "beat"):
        assert f"{process}.1" in output, output[-3000:]
    assert honcho.returncode is not None
    # A clean stop: the worker by its warm shutdown, with no pool process killed under it by
    # the SIGTERM honcho sends its whole process group (which left the worker waiting on the
    # pool's queue lock until honcho killed it).
    assert "Warm shutdown" in output, output[-3000:]
    assert "relay.stopped" in output, output[-3000:]
    assert "exited with 'signal" not in output, output[-3000:]
    # kombu's filesystem transport has its host named: no warning on each start.
    [ping] = ping_seen
    assert "No hostname was supplied" not in output + ping.stdout + ping.stderr
