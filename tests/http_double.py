"""A real HTTP server in the test process, for the services the product calls: a CI/CD
system's webhook endpoint (``tests.deployments.receiver``), GitHub's REST API
(``tests.deployments.fake_github``), a log witness, a trigger's destination. It records every
request and answers each as the test's ``answer`` function says: a ``Reply``, or ``None`` to
close the connection with no answer (a request taken, then lost)."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class QuietServer(ThreadingHTTPServer):
    """A caller that hangs up (timed out, killed, done with a connection) is no error. Its
    loop looks for ``shutdown`` every 50 ms rather than every 0.5 s: a test that stops it
    waits that long. Listens on IPv4, or IPv6 for an IPv6 address (``::1``)."""

    daemon_threads = True

    def __init__(self, server_address, handler_class) -> None:
        if ":" in server_address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(server_address, handler_class)

    def serve_forever(self, poll_interval: float = 0.05) -> None:
        super().serve_forever(poll_interval)

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


@dataclass
class Request:
    method: str
    path: str  # the path and query, as the caller sent them
    headers: dict[str, str]  # names in lower case
    body: bytes
    at: float = field(default_factory=time.monotonic)
    answered: int | None = None  # the status sent (None: no answer)

    @property
    def route(self) -> str:
        """The path without its query."""
        return urlsplit(self.path).path

    @property
    def segments(self) -> list[str]:
        return self.route.strip("/").split("/")

    @property
    def query(self) -> dict[str, str]:
        """The query's parameters, the first value of each."""
        return {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}

    def json(self) -> Any:
        return json.loads(self.body or b"{}")


@dataclass
class Reply:
    status: int
    body: Any = None  # bytes as they are, anything else as JSON
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def payload(self) -> bytes:
        return (
            self.body
            if isinstance(self.body, bytes)
            else json.dumps(self.body).encode()
        )


class HttpDouble:
    """``answer(request)`` runs in the server's thread for each request, after the request is
    recorded in ``requests``; a slow ``answer`` is a slow server. With ``tls``, a context
    for the server's side, it speaks HTTPS."""

    def __init__(
        self,
        answer: Callable[[Request], Reply | None],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.answer = answer
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self.server = QuietServer((host, port), self._handler_class())
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def url(self) -> str:
        """The server's base URL (no path)."""
        host = self.server.server_address[0]
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def __enter__(self) -> HttpDouble:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler_class(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):  # quiet
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(
                    method=self.command,
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length),
                )
                with double.lock:
                    double.requests.append(request)
                reply = double.answer(request)
                if reply is None:
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                payload = reply.payload()
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", reply.content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    request.answered = reply.status
                except OSError:  # the caller is gone (timed out, killed)
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        return Handler
