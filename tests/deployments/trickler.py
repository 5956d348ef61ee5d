"""A receiver that answers one byte at a time: a real TCP listener in the test process that
reads each request whole, then sends its answer a byte every ``interval`` seconds, so that no
single read of the caller ever waits long, until the caller hangs up.

``part`` says where the trickle is: ``"headers"`` (the status line and headers), or
``"body"`` (the headers at once, then a long body). Each connection is recorded: the request
line and headers it brought, when it came, when its caller hung up, and the bytes sent.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field

# How long past its own timeout or deadline a call to a trickler may take on a busy machine
# (a thread scheduled late, a connection slow to open) before a test calls it too late. Far
# below what a whole trickle lasts (``Trickler.lasts``), so a call that waits the trickle out
# still fails.
LATE_SECONDS = 4.0


@dataclass
class Trickled:
    request_line: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    sent: int = 0

    @property
    def held_seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started


class Trickler:
    def __init__(
        self, *, part: str = "headers", interval: float = 0.25, body_bytes: int = 40
    ) -> None:
        assert part in {"headers", "body"}
        self.part = part
        self.body_bytes = body_bytes
        self.interval = interval
        self.connections: list[Trickled] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/hooks/deploy"

    def __enter__(self) -> Trickler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.listener.close()

    def lasts(self) -> float:
        """Seconds the whole trickled answer takes: what a call without a bound would wait."""
        slow = self.body_bytes + (len(self._head()) if self.part == "headers" else 0)
        return slow * self.interval

    def _head(self) -> bytes:
        return (
            f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {self.body_bytes}\r\n\r\n"
        ).encode()

    def all_ended(self) -> bool:
        with self.lock:
            return all(c.ended is not None for c in self.connections)

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            record = Trickled()
            with self.lock:
                self.connections.append(record)
            threading.Thread(
                target=self._answer, args=(conn, record), daemon=True
            ).start()

    def _answer(self, conn: socket.socket, record: Trickled) -> None:
        try:
            with conn, contextlib.suppress(OSError):
                self._trickle(conn, record)
        finally:
            record.ended = time.monotonic()

    def _trickle(self, conn: socket.socket, record: Trickled) -> None:
        conn.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        record.request_line = lines[0]
        record.headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:])
        }
        length = int(record.headers.get("content-length") or 0)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            body += chunk
        head_out = self._head()
        body_out = b"x" * self.body_bytes
        if self.part == "body":
            conn.sendall(head_out)
            record.sent += len(head_out)
            slow = body_out
        else:
            slow = head_out + body_out
        for index in range(len(slow)):
            if self.stopping.is_set():
                break
            conn.sendall(slow[index : index + 1])
            record.sent += 1
            time.sleep(self.interval)
