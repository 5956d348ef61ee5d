"""Outages for tests, made real: a connection attempt to a closed port, a TCP proxy that cuts
the link (``TcpProxy``), not a mocked failure."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

from django.db import connection


@contextlib.contextmanager
def database_unreachable() -> Iterator[None]:
    """Inside, every new connection of this thread to the database is refused; outside, the
    database is back (the next query reconnects)."""
    original_port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["PORT"] = original_port


@contextlib.contextmanager
def broker_unreachable() -> Iterator[None]:
    """Inside, every message this thread publishes through Celery's current app goes to a
    closed port, and fails once the app's publish retries run out; outside, the project's
    app is current again. (Celery lets the ``CELERY_BROKER_URL`` environment variable win
    over an app's configuration: it points at the closed port too while inside.)"""
    import os

    from celery import Celery, current_app

    from tests.processes import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    previous = current_app._get_current_object()
    environment = os.environ.get("CELERY_BROKER_URL")
    os.environ["CELERY_BROKER_URL"] = url
    app = Celery("unreachable", broker=url, set_as_current=False)
    app.set_current()
    try:
        yield
    finally:
        previous.set_current()
        app.close()
        if environment is None:
            os.environ.pop("CELERY_BROKER_URL", None)
        else:
            os.environ["CELERY_BROKER_URL"] = environment


class TcpProxy:
    """A TCP proxy between the product's processes and a real server (PostgreSQL, Redis), to
    cut the link in the ways a network does, with the server itself untouched:

    - ``hold()``: a partition. Every byte sent either way is taken in (so the sender's TCP
      sees it acknowledged, as through a router that drops what follows) and held; new
      connections are accepted and held too. ``heal()`` delivers what was held, in order.
    - ``reset()``: every connection through the proxy is reset (RST both ways), as by a
      restart of the server or a firewall; new ones go through.
    - ``slow(seconds)``: each piece of data waits that long before it is passed on.
    - ``lossy(probability)``: each piece of data is lost with that probability, and its
      retransmission too, each loss costing what it costs under TCP: a retransmission
      timeout (``RETRANSMIT_SECONDS``, doubled at each loss in a row, ``RETRANSMISSIONS``
      in a row at most) before it is passed on.

    Runs in threads of the process that makes it, listening on ``listen`` (loopback, a free
    port by default); ``close()`` stops it."""

    # Linux's shortest retransmission timeout (TCP_RTO_MIN), and losses in a row at most.
    RETRANSMIT_SECONDS = 0.2
    RETRANSMISSIONS = 6

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        seed: int | None = None,
    ):
        import random
        import threading

        self.target = (target_host, target_port)
        self._listener = socket.create_server(listen)
        self.port = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._delay = 0.0
        self._loss = 0.0
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._accepted = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    # --- faults -------------------------------------------------------------------------

    def hold(self) -> None:
        self._flowing.clear()

    def heal(self) -> None:
        self._delay = 0.0
        self._loss = 0.0
        self._flowing.set()

    def slow(self, seconds: float) -> None:
        self._delay = seconds

    def lossy(self, probability: float) -> None:
        self._loss = probability

    def reset(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                _reset(sock)

    def accepted(self) -> int:
        """Every connection the proxy has passed on since it started, open or not. (No count
        of those open now: a process closes its connections between tasks, so such a count
        read at one instant says nothing about what went through.)"""
        with self._lock:
            return self._accepted

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        self._listener.close()
        self.reset()

    # --- forwarding ---------------------------------------------------------------------

    def _accept(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                _reset(client)
                continue
            pair = (client, server)
            with self._lock:
                self._pairs.append(pair)
                self._accepted += 1
            done = threading.Barrier(2, action=lambda pair=pair: self._forget(pair))
            for source, sink in (pair, pair[::-1]):
                threading.Thread(
                    target=self._pump, args=(source, sink, done), daemon=True
                ).start()

    def _forget(self, pair: tuple[socket.socket, socket.socket]) -> None:
        """Both directions ended: the pair is closed and no longer counted."""
        with self._lock:
            if pair in self._pairs:
                self._pairs.remove(pair)
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.close()

    def _pump(self, source: socket.socket, sink: socket.socket, done) -> None:
        import time

        try:
            while True:
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                self._flowing.wait()  # held: data, and the end of the stream too
                wait = self._delay + self._retransmissions() if data else 0.0
                if wait:
                    time.sleep(wait)
                try:
                    if not data:
                        sink.shutdown(socket.SHUT_WR)
                        return
                    sink.sendall(data)
                except OSError:
                    return
        finally:
            with contextlib.suppress(Exception):
                done.wait()

    def _retransmissions(self) -> float:
        """How long a piece of data waits for its retransmissions while ``lossy``."""
        wait, timeout = 0.0, self.RETRANSMIT_SECONDS
        for _ in range(self.RETRANSMISSIONS):
            if not self._loss or self._random.random() >= self._loss:
                break
            wait += timeout
            timeout *= 2
        return wait


def _reset(sock: socket.socket) -> None:
    """Closes ``sock`` abortively (SO_LINGER 0: an RST after the FIN). ``shutdown`` first: a
    thread blocked reading the socket would otherwise keep it open past ``close``."""
    import struct

    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
