"""The TCP fault proxy the network tests and the cluster chaos run cut links with
(``tests.outages.TcpProxy``): a link it makes lossy passes every byte, late by the
retransmission timeouts TCP would wait, and heals at once."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.outages import TcpProxy


def echo_server() -> socket.socket:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return listener


def round_trip(port: int, payload: bytes) -> float:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(payload)
        received = b""
        while len(received) < len(payload):
            received += sock.recv(65536)
    assert received == payload
    return time.monotonic() - started


@pytest.mark.slow
def test_a_lossy_link_delivers_every_byte_late_by_the_retransmissions(monkeypatch):
    monkeypatch.setattr(TcpProxy, "RETRANSMIT_SECONDS", 0.01)
    server = echo_server()
    proxy = TcpProxy("127.0.0.1", server.getsockname()[1], seed=1)
    try:
        # Every piece lost as often as a row of losses may be: 0.01 + 0.02 + ... + 0.32 s
        # each way, and nothing lost for good.
        proxy.lossy(1.0)
        lossy = round_trip(proxy.port, b"ping")
        assert lossy >= 2 * 0.63  # the proxy's own sleeps: never shorter
        proxy.heal()
        # Healed at once: no wait of a retransmission left. (Half a lossy round trip: what
        # is left for a busy machine's scheduling of the proxy's threads.)
        assert round_trip(proxy.port, b"ping") < 0.63
    finally:
        proxy.close()
        server.close()


def test_a_proxy_listens_where_it_is_told():
    server = echo_server()
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        port = probe.getsockname()[1]
    proxy = TcpProxy("127.0.0.1", server.getsockname()[1], listen=("127.0.0.2", port))
    try:
        assert proxy.port == port
        with socket.create_connection(("127.0.0.2", port), timeout=5) as sock:
            sock.sendall(b"x")
            assert sock.recv(1) == b"x"  # within the socket's timeout
    finally:
        proxy.close()
        server.close()
