"""The public GET endpoints on a real gunicorn, every method, as bytes on the wire
(docs/http-api.md, "Health and metrics", "Verifiable log"): HEAD is answered as GET without
a body; any other method is 405 with ``Allow: GET, HEAD`` and no body, never the CSRF
middleware's 403 page. Django's test client skips the CSRF check, which is how the suite had
missed the 403: these requests go through the whole stack of a real server."""

from __future__ import annotations

import socket

import pytest

from tests import processes

pytestmark = pytest.mark.slow

PUBLIC = [
    "/healthz",
    "/readyz",
    "/metrics",
    "/audit/checkpoint",
    "/audit/public-key",
    # An empty log: a proof's GET is 404 beyond_tree, which HEAD answers too.
    "/audit/proof/inclusion?index=0&size=1",
    "/audit/proof/consistency?from=1&to=1",
    "/audit/proof/inclusion",
]
REFUSED = ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "PROPFIND"]


@pytest.fixture(scope="module")
def running():
    """The module's one server, started by the first test that asks for it."""
    started: dict[str, processes.Process | int] = {}
    yield started
    process = started.get("process")
    if isinstance(process, processes.Process):
        process.stop()


@pytest.fixture
def server(running, db, tmp_path_factory) -> int:
    if "port" not in running:
        port = processes.free_port()
        running["process"] = processes.gunicorn(
            tmp_path_factory.mktemp("public-methods"),
            port=port,
            workers=2,
            env={"LOG_LEVEL": "WARNING"},
        ).start()
        processes.wait_http_ok(f"http://127.0.0.1:{port}/healthz")
        running["port"] = port
    port = running["port"]
    assert isinstance(port, int)
    return port


def exchange(port: int, method: str, path: str, body: bytes = b"") -> bytes:
    """One request on its own connection, and every byte the server sent until it closed."""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    if body:
        head += "Content-Type: application/json\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def content(headers: dict[str, str], body: bytes) -> bytes:
    """The body without its chunked framing, if it has one."""
    if headers.get("transfer-encoding") != "chunked":
        return body
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out, body = out + body[:size], body[size + 2 :]
    return out


@pytest.mark.parametrize("path", PUBLIC)
def test_head_is_answered_as_get_without_a_body(server, path):
    get_status, get_headers, get_body = parse(exchange(server, "GET", path))
    assert get_status != 405, get_body[:300]
    assert content(get_headers, get_body)
    status, headers, body = parse(exchange(server, "HEAD", path))
    assert status == get_status
    assert body == b""
    assert headers["content-type"] == get_headers["content-type"]


@pytest.mark.parametrize("method", REFUSED)
@pytest.mark.parametrize("path", PUBLIC)
def test_any_other_method_is_405_with_allow_and_no_body(server, path, method):
    for body in (b"", b"{}"):
        status, headers, raw = parse(exchange(server, method, path, body))
        assert status == 405, (method, path, raw[:300])
        assert headers["allow"] == "GET, HEAD"
        assert content(headers, raw) == b""
        assert "csrf" not in raw.decode("latin-1").lower()
