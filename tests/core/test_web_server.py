"""gunicorn as a deployment runs it: ``gunicorn config.wsgi`` at the repository root (so with
``gunicorn.conf.py``), on the production settings, against the test database."""

from __future__ import annotations

import contextlib

import pytest
import requests
from django.conf import settings

from tests import processes
from tests.core.test_settings import PRODUCTION_ENV

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def production_env(**overrides: str) -> dict[str, str]:
    env = {
        **PRODUCTION_ENV,
        "DATABASE_URL": processes.test_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(overrides)
    return env


@contextlib.contextmanager
def production_gunicorn(tmp_path, *, workers: int = 1, **env: str):
    port = processes.free_port()
    server = processes.Process(
        [str(processes.BIN / "gunicorn"), "config.wsgi", "-w", str(workers)],
        production_env(GUNICORN_BIND=f"127.0.0.1:{port}", **env),
        tmp_path / f"gunicorn-{port}.log",
    ).start()
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            processes.wait_http_ok(f"{base}/healthz", timeout=60)
        except AssertionError:
            raise AssertionError(server.log()[-3000:]) from None
        yield base, server
    finally:
        server.stop()


def test_gunicorn_believes_no_x_forwarded_proto_unless_configured(tmp_path):
    """A client on the same machine (127.0.0.1) sending ``X-Forwarded-Proto: https`` is not
    taken for HTTPS by gunicorn: the plain-HTTP request is still redirected, with no HSTS."""
    with production_gunicorn(tmp_path) as (base, _):
        answer = requests.get(
            f"{base}/api/whoami/",
            headers={"X-Forwarded-Proto": "https"},
            allow_redirects=False,
            timeout=10,
        )
    assert answer.status_code == 301
    assert answer.headers["Location"].startswith("https://")
    assert "Strict-Transport-Security" not in answer.headers


def test_gunicorn_believes_the_proxies_an_operator_names(tmp_path):
    with production_gunicorn(tmp_path, FORWARDED_ALLOW_IPS="127.0.0.1") as (base, _):
        answer = requests.get(
            f"{base}/api/whoami/",
            headers={"X-Forwarded-Proto": "https"},
            allow_redirects=False,
            timeout=10,
        )
    assert answer.status_code == 401  # served as HTTPS: no redirect
    assert "Strict-Transport-Security" in answer.headers
