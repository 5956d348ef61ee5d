"""Real processes for tests: Celery workers, beat and gunicorn, started as a user would start
them, against the test database and the test broker."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
    """The URL of the database the test run created (``test_...``), for child processes."""
    db = connection.settings_dict
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def child_env(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    # The broker URL below is this process's, already chosen for its pytest-xdist worker: a
    # child that saw the variable would count its Redis database down a second time.
    env.pop("PYTEST_XDIST_WORKER", None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.test",
            "DATABASE_URL": test_database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(overrides)
    return env


class Process:
    """A child process in its own process group, so that stopping it stops its children."""

    def __init__(
        self, args: list[str], env: dict[str, str], log_path: Path, cwd: Path = ROOT
    ):
        self.args = args
        self.env = env
        self.log_path = log_path
        self.cwd = cwd
        self.popen: subprocess.Popen | None = None
        self.started_at: float | None = None  # seconds since the epoch, when started

    def start(self) -> Process:
        self.started_at = time.time()
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed by the child's exit
        self.popen = subprocess.Popen(
            self.args,
            cwd=self.cwd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def kill(self) -> None:
        """kill -9 of the whole group: no cleanup, no acks, as when a machine dies."""
        self.signal_group(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(timeout=30)

    def stop(self, timeout: float = 20) -> None:
        if not self.alive():
            return
        self.signal_group(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def manage(
    *args: str, env: dict[str, str], check: bool = False, timeout: float = 180
) -> subprocess.CompletedProcess:
    """``manage.py <args>`` in its own process with exactly ``env``, as a user runs it; with
    ``check``, a failure fails the test and shows the command's output."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


# What `make run` (its Procfile) gives web, worker and beat: config.wsgi and the Celery app
# default to the production settings, manage.py to these.
LOCAL_SETTINGS = {"DJANGO_SETTINGS_MODULE": "config.settings.local"}


def embedded_env(tmp_path: Path, port: int) -> dict[str, str]:
    """The environment of a newcomer's first run: none of the test run's database, broker or
    settings, the embedded default (SQLite, filesystem broker) under ``tmp_path``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        {"APP_VAR_DIR": str(tmp_path), "WEB_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    )
    return env


# The commands of the product's processes, as docs/operations.md ("Processes") starts them:
# every test and benchmark that starts one starts it with these.


def celery_worker_command(
    *, concurrency: int = 1, name: str = "w1", loglevel: str = "INFO"
) -> list[str]:
    return [
        str(BIN / "celery"),
        "-A",
        "config",
        "worker",
        "--loglevel",
        loglevel,
        "--concurrency",
        str(concurrency),
        "--hostname",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
    ]


def celery_beat_command(*, schedule: Path, loglevel: str = "INFO") -> list[str]:
    return [
        str(BIN / "celery"),
        "-A",
        "config",
        "beat",
        "--loglevel",
        loglevel,
        "--schedule",
        str(schedule),
    ]


def gunicorn_command(
    *,
    port: int,
    workers: int = 2,
    threads: int | None = None,
    app: str = "config.wsgi",
    host: str = "127.0.0.1",
) -> list[str]:
    """With ``threads``, threaded workers: up to ``workers x threads`` requests inside the
    views at the same moment (the concurrency tests). ``app``: the WSGI module served;
    ``host``: the address it listens on."""
    command = [
        str(BIN / "gunicorn"),
        app,
        "--bind",
        f"{host}:{port}",
        "--workers",
        str(workers),
    ]
    if threads is not None:
        command += ["--worker-class", "gthread", "--threads", str(threads)]
    return command


def relay_command() -> list[str]:
    return [str(BIN / "python"), "manage.py", "relay"]


def celery_worker(
    tmp_path: Path, *, concurrency: int = 1, name: str = "w1", env: dict | None = None
) -> Process:
    # Several workers run on this machine at once (other tests, other runs): none serves its
    # metrics on the default port unless a test gives it one.
    env = {"CELERY_METRICS_PORT": "0", **(env or {})}
    return Process(
        celery_worker_command(concurrency=concurrency, name=name),
        child_env(**env),
        tmp_path / f"worker-{name}.log",
    )


class Workers:
    """The Celery worker processes of one test (the ``workers`` fixture of tests/conftest.py,
    which kills them at the end and empties the broker before and after): start them, wait
    for them to be ready, and wait for what they do with every worker's log in the failure."""

    def __init__(self, tmp_path: Path, run: Callable[[Process], Process]) -> None:
        self.tmp_path = tmp_path
        self.run = run
        self.started: list[Process] = []

    def start(
        self, env: dict | None = None, *, name: str = "w1", concurrency: int = 1
    ) -> Process:
        return self.add(
            celery_worker(self.tmp_path, concurrency=concurrency, name=name, env=env)
        )

    def add(self, worker: Process) -> Process:
        """Starts a worker process made otherwise (another command, another wrapper)."""
        self.started.append(self.run(worker))
        return worker

    def ready(self, timeout: float = 60) -> None:
        """Until every worker started says it is ready (it consumes)."""
        self.wait_until(
            lambda: all("ready" in w.log() for w in self.started),
            timeout=timeout,
            what="every worker ready",
        )

    def logs(self, chars: int = 3000) -> str:
        return "\n".join(
            f"--- {w.log_path.name}:\n{w.log()[-chars:]}" for w in self.started
        )

    def wait_until(
        self, predicate, *, timeout: float = 60, interval: float = 0.1, what: str = ""
    ):
        """``wait_until``, failing with the workers' logs."""
        try:
            return wait_until(predicate, timeout=timeout, interval=interval, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None


def celery_beat(tmp_path: Path, *, env: dict | None = None) -> Process:
    return Process(
        celery_beat_command(schedule=tmp_path / "celerybeat-schedule"),
        child_env(**(env or {})),
        tmp_path / "beat.log",
    )


def gunicorn(
    tmp_path: Path,
    *,
    port: int,
    workers: int = 2,
    threads: int | None = None,
    env: dict | None = None,
) -> Process:
    return Process(
        gunicorn_command(port=port, workers=workers, threads=threads),
        child_env(**(env or {})),
        tmp_path / "gunicorn.log",
    )


NGINX = Path("/usr/sbin/nginx")
NGINX_TEMPLATE = ROOT / "deploy" / "nginx" / "retrysafe.conf.template"


def nginx(
    tmp_path: Path, *, port: int, upstream_port: int, **variables: str
) -> Process:
    """Debian's nginx with ``deploy/nginx/retrysafe.conf.template``, its variables
    substituted as the nginx image's envsubst does (``variables`` override the defaults), in
    a main configuration of the test's own (files under ``tmp_path``)."""
    import re

    if not NGINX.exists():
        raise AssertionError(
            "nginx is missing: `make test` installs it (Debian's nginx package, "
            "scripts/ensure_system_tools.sh)"
        )
    values = {
        "RETRYSAFE_LISTEN": f"127.0.0.1:{port}",
        "RETRYSAFE_UPSTREAM": f"127.0.0.1:{upstream_port}",
        "WEBHOOK_MAX_BODY_BYTES": str(settings.WEBHOOK_MAX_BODY_BYTES),
        "DATA_UPLOAD_MAX_MEMORY_SIZE": str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE),
        **variables,
    }
    folder = tmp_path / f"nginx-{port}"
    for temp in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (folder / temp).mkdir(parents=True)
    site = folder / "retrysafe.conf"
    # ${NAME} only, as the template writes its own variables; nginx's ($host) stay.
    site.write_text(
        re.sub(
            r"\$\{(\w+)\}",
            lambda match: values[match.group(1)],
            NGINX_TEMPLATE.read_text(),
        )
    )
    temp_paths = "\n".join(
        f"    {kind}_temp_path {folder / name};"
        for kind, name in (
            ("client_body", "body"),
            ("proxy", "proxy"),
            ("fastcgi", "fastcgi"),
            ("uwsgi", "uwsgi"),
            ("scgi", "scgi"),
        )
    )
    main = folder / "nginx.conf"
    main.write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"daemon off;\nworker_processes 1;\npid {folder / 'nginx.pid'};\n"
        + f"error_log {folder / 'error.log'} info;\n"
        + "events { worker_connections 512; }\n"
        + f"http {{\n    access_log {folder / 'access.log'};\n{temp_paths}\n"
        + f"    include {site};\n}}\n"
    )
    return Process(
        [str(NGINX), "-e", str(folder / "error.log"), "-c", str(main)],
        dict(os.environ),
        tmp_path / f"nginx-{port}.log",
    )


def wait_until(
    predicate, *, timeout: float = 30, interval: float = 0.1, what: str = ""
):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def wait_http_ok(url: str, *, timeout: float = 30) -> None:
    def ok() -> bool:
        try:
            return requests.get(url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_until(ok, timeout=timeout, what=url)


def purge_broker() -> None:
    """Empties the app's queues on a connection of its pool (the one it publishes on): a new
    connection for each purge cost about ten times as much, and tests purge often."""
    from config.celery_app import app

    with app.pool.acquire(block=True) as conn:
        app.control.purge(connection=conn)
