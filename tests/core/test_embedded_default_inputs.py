"""Hostile and unlucky input on the embedded default (SQLite): the same answers as on
PostgreSQL. A real gunicorn on ``config.settings.local`` for what a producer sends, and the
tests of each case run again on SQLite for what the database decides."""

import functools
import json
import subprocess
import sys

import pytest
import requests

from tests.core.test_embedded_default_event import DEMO_SECRET, DEMO_TOKEN
from tests.integrations.github.factories import github_headers
from tests.integrations.research.factories import research_event
from tests.processes import (
    BIN,
    LOCAL_SETTINGS,
    ROOT,
    Process,
    embedded_env,
    free_port,
    manage,
    wait_http_ok,
)
from tests.threads import run_together
from tests.webhooks.factories import GITHUB_SECRET, encode, signed_headers

pytestmark = pytest.mark.slow

# The modules of docs/security.md's input cases that do not start processes.
CASE_MODULES = [
    "tests/webhooks/test_ingest_replay.py",
    "tests/webhooks/test_unstorable_values.py",
    "tests/webhooks/test_deep_bodies.py",
    "tests/webhooks/test_event_api_errors.py",
    "tests/core/test_api_bodies.py",
    "tests/webhooks/test_mismatch_evidence.py",
    "tests/webhooks/test_dedup_ledger.py",
    "tests/webhooks/test_dedup_horizon.py",
    "tests/audit/test_dashboard.py",
    "tests/webhooks/test_retention_page.py",
    "tests/audit/test_dashboard_figures.py",
    "tests/core/test_date_inputs.py",
]


def test_the_input_cases_hold_on_sqlite(tmp_path):
    """The same tests, on a SQLite database (the test settings; the embedded default's own
    settings need collected static files for the admin pages)."""
    env = embedded_env(tmp_path, free_port())
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'test.sqlite3'}"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CASE_MODULES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """One web server on a fresh SQLite file and the demo data, for the module's tests."""
    tmp_path = tmp_path_factory.mktemp("embedded")
    port = free_port()
    env = embedded_env(tmp_path, port)
    manage("migrate", "--noinput", env=env, check=True)
    manage("demo_setup", env=env, check=True)
    manage(
        "webhook_source",
        "create",
        "gh",
        "--scheme",
        "github",
        "--handler",
        "github",
        "--secret",
        GITHUB_SECRET,
        env=env,
        check=True,
    )
    web = Process(
        [
            str(BIN / "gunicorn"),
            "config.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "-w",
            "2",
        ],
        env | LOCAL_SETTINGS,
        tmp_path / "web.log",
    ).start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http_ok(f"{url}/healthz", timeout=60)
        yield url
    finally:
        web.stop()


def github_post(url: str, raw: bytes, delivery: str) -> requests.Response:
    headers = github_headers(raw, delivery=delivery)
    return requests.post(f"{url}/webhooks/gh/", data=raw, headers=headers, timeout=30)


def test_a_github_body_under_many_delivery_ids_at_once_is_one_event(embedded):
    raw = encode({"zen": "Design for failure.", "hook_id": 7})
    first = github_post(embedded, raw, "delivery-first")
    assert first.status_code == 202, first.text

    replays, errors = run_together(
        [
            functools.partial(github_post, embedded, raw, f"delivery-{n}")
            for n in range(8)
        ]
    )
    assert not errors, errors

    for response in replays:
        assert response.status_code == 200, response.text
        assert response.json()["event_id"] == "delivery-first"
    status = requests.get(
        f"{embedded}/api/webhooks/gh/events/delivery-first/",
        headers={"Authorization": f"Bearer {DEMO_TOKEN}"},
        timeout=10,
    ).json()
    assert status["delivery_count"] == 9
    missing = requests.get(
        f"{embedded}/api/webhooks/gh/events/delivery-3/",
        headers={"Authorization": f"Bearer {DEMO_TOKEN}"},
        timeout=10,
    )
    assert missing.status_code == 404


@pytest.mark.parametrize(
    "value", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"]
)
@pytest.mark.parametrize("field", ["occurred_at", "delivered_at", "published_at"])
def test_a_date_outside_the_range_is_422_not_500(embedded, field, value):
    body = research_event()
    if field == "published_at":
        body["source"]["published_at"] = value
    else:
        body[field] = value
    raw = encode(body)
    headers = signed_headers(
        raw_body=raw, event_id=body["event_id"], secret=DEMO_SECRET
    )
    response = requests.post(
        f"{embedded}/webhooks/demo/", data=raw, headers=headers, timeout=30
    )
    assert response.status_code == 422, response.text
    details = response.json()["details"]
    assert field in (details["source"] if field == "published_at" else details)


@pytest.mark.parametrize("raw", [b"", b"[]", b"[" * 100_000])
def test_api_bodies_that_are_not_an_object_are_400(embedded, raw):
    response = requests.post(
        f"{embedded}/api/deployments/",
        data=raw,
        headers={
            "Authorization": f"Bearer {DEMO_TOKEN}",
            "Idempotency-Key": "k-1",
            "Content-Type": "application/json",
        },
        timeout=30,
    )
    assert response.status_code == 400, response.text
    assert json.loads(response.content) == {"error": "invalid_json"}
