import os

import kombu.utils.functional
import pytest

from config.celery_app import app as celery_app
from tests.outages import database_unreachable

pytestmark = pytest.mark.django_db

UNREACHABLE_BROKER = "redis://127.0.0.1:1/0"


def test_healthz_answers_without_checking_anything(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_ready_with_real_database_and_broker(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"] == {"database": True, "broker": True}


def test_readyz_is_503_when_the_broker_is_unreachable(client, monkeypatch):
    configured = celery_app.conf.broker_url
    environment = os.environ.get("CELERY_BROKER_URL")
    with monkeypatch.context() as patch:
        # A real connection attempt to a closed port, not a mocked failure. Celery lets the
        # CELERY_BROKER_URL environment variable, when there is one, win over its
        # configuration, so both are set. The configuration first: monkeypatch restores the
        # value it read, and read after the variable was set, that would be the unreachable
        # URL, for every later test.
        patch.setattr(celery_app.conf, "broker_url", UNREACHABLE_BROKER)
        patch.setenv("CELERY_BROKER_URL", UNREACHABLE_BROKER)
        # The check tries twice, with kombu's two-second pause between the attempts: the
        # pause is skipped (recorded instead), both attempts still meet the closed port.
        pauses: list[float] = []
        patch.setattr(kombu.utils.functional, "sleep", pauses.append)
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"] == {"database": True, "broker": False}
    assert pauses  # it did try again before giving up
    # Nothing of the unreachable broker is left for the tests that run after this one.
    assert celery_app.conf.broker_url == configured
    assert os.environ.get("CELERY_BROKER_URL") == environment


@pytest.mark.django_db(transaction=True)
def test_readyz_is_503_when_the_database_is_unreachable(client):
    with database_unreachable():
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] is False


def test_healthz_and_readyz_refuse_other_methods(client):
    # A body-less POST, as a probe sends one (the test client's default body is multipart,
    # refused with 415 before any view: tests/core/test_request_bodies.py).
    for path in ("/healthz", "/readyz"):
        assert client.generic("POST", path).status_code == 405
        assert client.put(path).status_code == 405


@pytest.mark.django_db
def test_an_unknown_api_path_answers_the_json_error_body(client):
    response = client.get("/api/no-such-thing/")
    assert response.status_code == 404
    assert response.json() == {"error": "not_found"}
    # Pages outside the API keep Django's own 404 page.
    assert client.get("/no-such-page/").status_code == 404
    assert client.get("/no-such-page/")["Content-Type"].startswith("text/html")
