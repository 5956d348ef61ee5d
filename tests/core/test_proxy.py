"""The production shape: Debian's real nginx with deploy/nginx/'s configuration in front of a
real gunicorn (sync workers, gunicorn.conf.py). Clients that send their headers and then
nothing stall gunicorn when it faces them, not when nginx does; the proxy bounds bodies, sets
the X-Forwarded-* headers itself, keeps /metrics to the private network and limits the rate
of requests to the admin's login and the public log endpoints."""

from __future__ import annotations

import contextlib
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests import processes
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import WebhookSourceFactory, encode, signed_headers
from webhooks.models import InboxEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MAX_BODY = 4096
TEMPLATE = processes.NGINX_TEMPLATE.read_text()
CONNECTIONS_PER_ADDRESS = int(
    re.search(r"limit_conn retrysafe_per_address (\d+);", TEMPLATE).group(1)
)


def request_rate(zone: str) -> tuple[float, int]:
    """The zone's rate (requests per second) and its burst, as the template sets them."""
    number, unit = re.search(rf"zone={zone}:\w+ rate=(\d+)r/([sm]);", TEMPLATE).groups()
    burst = re.search(rf"limit_req zone={zone} burst=(\d+) nodelay;", TEMPLATE)
    return int(number) / (60 if unit == "m" else 1), int(burst.group(1))


def started(process: processes.Process, url: str) -> processes.Process:
    process.start()
    try:
        processes.wait_http_ok(url, timeout=60)
    except AssertionError:
        process.stop()
        raise AssertionError(process.log()[-3000:]) from None
    return process


@contextlib.contextmanager
def stack(tmp_path, *, gunicorn_env: dict | None = None):
    """gunicorn (two sync workers) and nginx in front of it: their base URLs."""
    web_port, proxy_port = processes.free_port(), processes.free_port()
    web = processes.gunicorn(
        tmp_path,
        port=web_port,
        workers=2,
        env={"WEBHOOK_MAX_BODY_BYTES": str(MAX_BODY), **(gunicorn_env or {})},
    )
    proxy = processes.nginx(
        tmp_path,
        port=proxy_port,
        upstream_port=web_port,
        WEBHOOK_MAX_BODY_BYTES=str(MAX_BODY),
    )
    direct, proxied = f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{proxy_port}"
    started(web, f"{direct}/healthz")
    try:
        started(proxy, f"{proxied}/healthz")
        try:
            yield direct, proxied
        finally:
            proxy.stop()
    finally:
        web.stop()


@contextlib.contextmanager
def slow_clients(base: str, count: int, slug: str = "res"):
    """``count`` connections that send a webhook's headers, ``Content-Length: 1000``, and
    then nothing."""
    host, port = base.removeprefix("http://").split(":")
    sockets = []
    try:
        for _ in range(count):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(
                f"POST /webhooks/{slug}/ HTTP/1.1\r\nHost: {host}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode()
            )
            sockets.append(sock)
        time.sleep(0.5)  # every one of them taken in by a worker (or by the proxy)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(64) == b""
    except ConnectionResetError:
        return True


def signed_delivery(base: str, slug: str = "res") -> requests.Response:
    body = research_event()
    raw = encode(body)
    headers = signed_headers(raw_body=raw, event_id=body["event_id"])
    return requests.post(
        f"{base}/webhooks/{slug}/", data=raw, headers=headers, timeout=10
    )


def test_slow_clients_stall_gunicorn_alone_but_not_behind_the_proxy(tmp_path):
    WebhookSourceFactory(slug="res")
    with stack(tmp_path) as (direct, proxied):
        # Facing gunicorn directly, one slow client per worker: nothing else is answered.
        with slow_clients(direct, 2), pytest.raises(requests.Timeout):
            requests.get(f"{direct}/healthz", timeout=3)
        processes.wait_http_ok(f"{direct}/healthz", timeout=30)

        # Behind nginx, three times as many: gunicorn never sees them.
        with slow_clients(proxied, 6) as sockets:
            # Stalled, it would wait until the slow ones are let go: the timeout tells.
            health = requests.get(f"{proxied}/healthz", timeout=5)
            assert health.status_code == 200
            # A producer's delivery meanwhile is accepted, not lost.
            accepted = signed_delivery(proxied)
            assert accepted.status_code == 202, accepted.text
            # And the proxy gives up on the slow ones after its body timeout: it closes
            # (resets) their connections.
            for sock in sockets:
                sock.settimeout(15)
                assert closed_by_peer(sock)
    assert InboxEvent.objects.count() == 1


def test_the_proxy_limits_connections_per_address(tmp_path):
    WebhookSourceFactory(slug="res")
    with stack(tmp_path) as (_, proxied):
        with slow_clients(proxied, CONNECTIONS_PER_ADDRESS):
            refused = requests.get(f"{proxied}/healthz", timeout=5)
            assert refused.status_code == 429
            assert refused.json() == {"error": "throttled"}
        processes.wait_until(
            lambda: requests.get(f"{proxied}/healthz", timeout=5).status_code == 200,
            timeout=10,
        )


def test_the_proxy_bounds_bodies_as_the_application_does(tmp_path):
    WebhookSourceFactory(slug="res")
    with stack(tmp_path) as (_, proxied):
        big = research_event(data={"summary": "x" * MAX_BODY})
        raw = encode(big)
        headers = signed_headers(raw_body=raw, event_id=big["event_id"])
        refused = requests.post(
            f"{proxied}/webhooks/res/", data=raw, headers=headers, timeout=10
        )
        assert refused.status_code == 413
        assert refused.json() == {"error": "payload_too_large"}
        # Within the limit, sent chunked: nginx reads it whole, gunicorn gets its length.
        body = research_event()
        raw = encode(body)
        headers = signed_headers(raw_body=raw, event_id=body["event_id"])
        chunked = requests.post(
            f"{proxied}/webhooks/res/",
            data=iter([raw[:100], raw[100:]]),
            headers=headers,
            timeout=10,
        )
        assert chunked.status_code == 202, chunked.text
        assert bytes(InboxEvent.objects.get().raw_body) == raw
        # Any other body over Django's own limit.
        from django.conf import settings

        api = requests.post(
            f"{proxied}/api/deployments/",
            data=b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1),
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        assert api.status_code == 413
        assert api.json() == {"error": "payload_too_large"}


def test_the_proxy_sets_the_forwarded_headers_itself(tmp_path):
    log_format = (
        "proto=%({x-forwarded-proto}i)s for=%({x-forwarded-for}i)s "
        "fhost=%({x-forwarded-host}i)s host=%({host}i)s"
    )
    env = {
        "GUNICORN_CMD_ARGS": f"--access-logfile - --access-logformat '{log_format}'",
        "LOG_LEVEL": "WARNING",
    }
    with stack(tmp_path, gunicorn_env=env) as (_, proxied):
        answer = requests.get(
            f"{proxied}/healthz",
            headers={
                "X-Forwarded-Proto": "https",
                "X-Forwarded-For": "203.0.113.66",
                "X-Forwarded-Host": "attacker.example",
            },
            timeout=5,
        )
        assert answer.status_code == 200
        port = proxied.rpartition(":")[2]
        # Only this proxy's view of the request reaches gunicorn: the client's claims are
        # replaced, and the address it saw is appended to X-Forwarded-For.
        processes.wait_until(
            lambda: any(
                line.startswith("proto=")
                for line in (tmp_path / "gunicorn.log").read_text().splitlines()
            ),
            timeout=10,
        )
    logged = [
        line
        for line in (tmp_path / "gunicorn.log").read_text().splitlines()
        if "for=203.0.113.66" in line
    ]
    assert logged == [
        f"proto=http for=203.0.113.66, 127.0.0.1 fhost=127.0.0.1:{port} "
        f"host=127.0.0.1:{port}"
    ]


def test_metrics_are_not_served_through_the_proxy(tmp_path):
    with stack(tmp_path) as (direct, proxied):
        assert requests.get(f"{proxied}/metrics", timeout=5).status_code == 404
        assert requests.get(f"{direct}/metrics", timeout=5).status_code == 200


def flood(url: str, count: int, *, method: str = "GET", data=None):
    """``count`` requests at once (eight connections of one client address): their answers,
    and how long they all took."""
    started_at = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(
                lambda _: requests.request(method, url, data=data, timeout=10),
                range(count),
            )
        )
    return answers, time.monotonic() - started_at


def test_the_proxy_limits_the_rate_of_logins_and_of_the_public_log(tmp_path):
    login_rate, login_burst = request_rate("retrysafe_login")
    log_rate, log_burst = request_rate("retrysafe_public_log")
    # A few logins a minute, a small burst; the log's proofs many times a second.
    assert login_rate <= 1 / 5 and login_burst <= 10
    assert log_rate >= 5 and log_burst >= 20
    with stack(tmp_path) as (direct, proxied):
        # Within the limit: the login page and its form, as a person uses them.
        started_at = time.monotonic()
        page = requests.get(f"{proxied}/admin/login/", timeout=10)
        assert page.status_code == 200
        post = requests.post(
            f"{proxied}/admin/login/?next=/admin/",
            data={"username": "nobody", "password": "wrong"},
            timeout=10,
        )
        assert post.status_code == 403  # no CSRF token: refused by Django, not nginx
        # A flood of guesses: the burst is served, the rest refused by the proxy.
        answers, _ = flood(f"{proxied}/admin/login/", 30, method="POST", data={})
        took = time.monotonic() - started_at
        served = [a for a in answers if a.status_code != 429]
        refused = [a for a in answers if a.status_code == 429]
        # The page and the form above took two of the burst's requests.
        assert 2 + len(served) <= login_burst + 1 + login_rate * took + 1
        assert {a.status_code for a in served} == {403}
        assert refused[0].json() == {"error": "throttled"}
        assert refused[0].headers["Content-Type"] == "application/json"
        assert int(refused[0].headers["Retry-After"]) >= 1 / login_rate
        # The limit is the login's own: the rest of the admin and the API still answer.
        assert requests.get(f"{proxied}/healthz", timeout=10).status_code == 200
        assert (
            requests.get(f"{proxied}/admin/", allow_redirects=False, timeout=10)
        ).status_code == 302
        # gunicorn alone does not limit it (the proxy does).
        direct_answers, _ = flood(f"{direct}/admin/login/", 10)
        assert {a.status_code for a in direct_answers} == {200}

        # The public log: a verifier's requests are served, a flood is cut.
        key = f"{proxied}/audit/public-key"
        answers, took = flood(key, 200)
        codes = [a.status_code for a in answers]
        assert set(codes) == {200, 429}
        # The burst at once, then the rate.
        assert log_burst + 1 <= codes.count(200) <= log_burst + 1 + log_rate * took + 1
        refused = [a for a in answers if a.status_code == 429]
        assert refused and refused[0].json() == {"error": "throttled"}
        assert refused[0].headers["Retry-After"] == "1"
        # Once the client slows to the rate, its requests are served again.
        time.sleep(2 / log_rate)
        assert requests.get(key, timeout=10).status_code == 200
        assert (
            requests.get(f"{proxied}/audit/checkpoint", timeout=10).status_code == 200
        )
        # Other addresses are not limited by this one's flood: the webhooks still answer.
        assert requests.get(f"{proxied}/healthz", timeout=10).status_code == 200
