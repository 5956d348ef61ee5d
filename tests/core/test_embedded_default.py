"""The embedded default as a newcomer runs it: the README's Procfile (web + worker + beat) on a
fresh SQLite file and a filesystem broker, no PostgreSQL or Redis involved."""

import os
import signal
import subprocess
import sys

import pytest
import requests

from tests.processes import ROOT, free_port, wait_until

pytestmark = pytest.mark.slow


def local_env(tmp_path, port):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        {"APP_VAR_DIR": str(tmp_path), "WEB_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    )
    return env


def test_procfile_runs_web_worker_and_beat_on_sqlite_and_a_filesystem_broker(tmp_path):
    port = free_port()
    env = local_env(tmp_path, port)
    python = sys.executable
    subprocess.run(
        [python, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=180,
    )
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

        ping = subprocess.run(
            [python, "manage.py", "worker_ping", "--timeout", "60"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert "answered" in ping.stdout
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
