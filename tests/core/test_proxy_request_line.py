"""An over-long request line behind deploy/nginx/ (docs/http-api.md, "Errors"): the proxy
answers it 414 with the JSON error body every refusal has, and what it lets through gunicorn
reads (gunicorn's own limit is the proxy's), so that no request line meets gunicorn's plain
400 page. Real nginx and gunicorn (tests/core/test_proxy.py's stack)."""

from __future__ import annotations

import pytest
import requests

from tests.core.test_proxy import stack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_request_line_over_the_limit_is_414_json(tmp_path):
    with stack(tmp_path) as (_, proxied):
        answer = requests.get(
            f"{proxied}/api/deployments/", params={"cursor": "x" * 9000}, timeout=10
        )
        assert answer.status_code == 414
        assert answer.headers["Content-Type"] == "application/json"
        assert answer.json() == {"error": "uri_too_long"}


def test_a_request_line_the_proxy_lets_through_reaches_the_application(tmp_path):
    with stack(tmp_path) as (direct, proxied):
        for base in (proxied, direct):
            # Longer than gunicorn's default limit (4094), within the proxy's (8 KiB).
            answer = requests.get(
                f"{base}/api/deployments/", params={"cursor": "x" * 6000}, timeout=10
            )
            assert answer.status_code == 401, (base, answer.text[:200])
            assert answer.json() == {"error": "unauthorized"}
