"""The production shape: Debian's real nginx with deploy/nginx/'s configuration in front of a
real gunicorn (sync workers, gunicorn.conf.py). Clients that send their headers and then
nothing stall gunicorn when it faces them, not when nginx does; the proxy bounds bodies, sets
the X-Forwarded-* headers itself and keeps /metrics to the private network."""

from __future__ import annotations

import contextlib
import re
import socket
import time

import pytest
import requests

from tests import processes
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import WebhookSourceFactory, encode, signed_headers
from webhooks.models import InboxEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MAX_BODY = 4096
CONNECTIONS_PER_ADDRESS = int(
    re.search(
        r"limit_conn retrysafe_per_address (\d+);",
        processes.NGINX_TEMPLATE.read_text(),
    ).group(1)
)


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
            started_at = time.monotonic()
            health = requests.get(f"{proxied}/healthz", timeout=5)
            assert health.status_code == 200
            assert time.monotonic() - started_at < 2
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
