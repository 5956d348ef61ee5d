"""Calls to URLs that operators configure (a trigger's receiver, GitHub's API, the audit
witness): where they may go, and for how long (docs/security.md, "Deploy targets").

A URL's host is looked up once per connection, every address it answers is checked against
``DEPLOY_TRIGGER_DENY_NETWORKS`` (each address, and every IPv4 address an IPv6 one carries:
IPv4-mapped, -compatible and -translated, NAT64, 6to4, Teredo), and the connection goes to a
checked address. The lookup is the system's (``getaddrinfo``, as a connection would make it),
so every spelling of an address it accepts (``2852039166``, ``169.254.43518``,
``0xa9fea9fe``) is checked as what it connects to. Nothing is sent to a name that does not
resolve. The request keeps the URL's name: its ``Host`` header, TLS's server name and the
certificate's check (``PinnedTransport``).

Within ``deadline(seconds)``, the lookup, every connect, TLS handshake, read and write gets
at most the time left: a peer that answers a byte at a time, each byte well within a read
timeout, cannot hold a call past it.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# A lookup: the addresses a host name answers for a port (``getaddrinfo``'s), in its order.
Resolver = Callable[[str, int], list[str]]

# The connect timeout: at most this, never more than a client's timeout.
CONNECT_TIMEOUT_SECONDS = 5.0
# A write goes in pieces of this size, each given only the time left, so that a peer that
# reads slowly cannot stretch one large write past the deadline.
WRITE_PIECE_BYTES = 16 * 1024

# Where IPv6 addresses carry an IPv4 address in their last 32 bits.
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated (RFC 4291), but still parsed
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT (RFC 2765)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # the well-known prefix (RFC 6052)
# NAT64's local-use prefix (RFC 8215): a network uses a prefix of 48, 56, 64 or 96 bits
# within it, which the address does not say. Each reading is checked.
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_NAT64_LOCAL_PREFIXES = (48, 56, 64, 96)


class DeniedDestination(Exception):
    """The URL is not http(s), or its host is, or resolves to, an address in
    ``DEPLOY_TRIGGER_DENY_NETWORKS``."""


def _nat64_embedded(
    address: ipaddress.IPv6Address, prefix: int
) -> ipaddress.IPv4Address:
    """The IPv4 address in a NAT64 address of a ``prefix``-bit prefix (RFC 6052, 2.2): bits
    64 to 71 are always zero, and the IPv4 address goes around them."""
    packed = address.packed
    if prefix == 96:
        return ipaddress.IPv4Address(packed[12:16])
    around = packed[:8] + packed[9:]
    start = prefix // 8
    return ipaddress.IPv4Address(around[start : start + 4])


def address_forms(address: IPAddress) -> list[IPAddress]:
    """``address``, then every address it stands for: the IPv4 address an IPv6 one carries
    (mapped, compatible, translated, NAT64, 6to4, Teredo's server and client), and the
    IPv4-mapped form of an IPv4 address (which a denied IPv6 network may hold)."""
    forms: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv4Address):
        forms.append(ipaddress.IPv6Address(f"::ffff:{address}"))
        return forms
    last32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        forms.append(address.ipv4_mapped)
    if address in _COMPATIBLE and int(address) > 1:  # :: and ::1 are not IPv4 addresses
        forms.append(last32)
    if address in _TRANSLATED or address in _NAT64:
        forms.append(last32)
    if address in _NAT64_LOCAL:
        forms += [_nat64_embedded(address, n) for n in _NAT64_LOCAL_PREFIXES]
    if address.sixtofour is not None:
        forms.append(address.sixtofour)
    if address.teredo is not None:
        forms += list(address.teredo)
    return forms


def denied_networks() -> list[IPNetwork]:
    return [
        ipaddress.ip_network(text.strip(), strict=False)
        for text in settings.DEPLOY_TRIGGER_DENY_NETWORKS
        if text.strip()
    ]


def address_check(host: str, address: str, networks: Iterable[IPNetwork]) -> None:
    """Raises ``DeniedDestination`` when ``address`` (an answer for ``host``), in any of
    its forms, lies in one of ``networks``."""
    parsed = ipaddress.ip_address(address.split("%")[0])
    for form in address_forms(parsed):
        for network in networks:
            if form.version == network.version and form in network:
                shown = f"{parsed}" if form == parsed else f"{parsed} ({form})"
                raise DeniedDestination(
                    f"{host} is {shown}, in the denied network {network}"
                )


def system_resolve(host: str, port: int) -> list[str]:
    """The addresses the system's resolver answers for ``host``, in its order, each once
    (as ``socket.create_connection`` would try them)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def resolve_within(
    host: str, port: int, *, timeout: float | None, resolve: Resolver
) -> list[str]:
    """``resolve(host, port)``, given up after ``timeout`` (``TimeoutError``): the system's
    lookup cannot be interrupted, so it runs in a thread of its own, left to finish alone."""
    if timeout is None:
        return resolve(host, port)
    found: Future[list[str]] = Future()

    def run() -> None:
        try:
            found.set_result(resolve(host, port))
        except BaseException as exc:  # handed to the caller
            found.set_exception(exc)

    threading.Thread(target=run, name="egress-resolve", daemon=True).start()
    try:
        return found.result(timeout)
    except TimeoutError:
        if found.done():
            raise
        raise TimeoutError(f"{host} did not resolve within {timeout:.3g} s") from None


def url_origin(url: str) -> tuple[str, int]:
    """The host and port of an http(s) URL; ``DeniedDestination`` for any other URL."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # an unclosed IPv6 bracket, a port that is no number
        raise DeniedDestination("not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # The URL itself is not repeated: its query may hold a token.
        raise DeniedDestination(
            f"not an http(s) URL with a host (scheme {parts.scheme!r})"
        )
    return parts.hostname, port


def destination_check(url: str, *, resolve: Resolver = system_resolve) -> None:
    """Refuses (``DeniedDestination``) a URL that is not http(s), or whose host is, or
    resolves now to, an address in ``DEPLOY_TRIGGER_DENY_NETWORKS`` in any of its forms: the
    check of a URL as it is saved. A name that does not resolve now passes here; a call
    looks it up again, checks what it answers then, and sends nothing without an answer."""
    host, port = url_origin(url)
    networks = denied_networks()
    if not networks:
        return
    try:
        addresses = resolve_within(
            host, port, timeout=CONNECT_TIMEOUT_SECONDS, resolve=resolve
        )
    except (OSError, UnicodeError):  # TimeoutError is an OSError
        return
    for address in addresses:
        address_check(host, address, networks)


# --- the deadline of a call ---------------------------------------------------------------

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "egress_deadline", default=None
)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every connection made and used within ends ``seconds`` from now at the latest (or
    at an enclosing deadline, if that comes first): each connect, TLS handshake, read and
    write gets at most the time left, and fails with httpx's timeout of its kind once none
    is."""
    end = time.monotonic() + seconds
    enclosing = _deadline.get()
    if enclosing is not None:
        end = min(end, enclosing)
    token = _deadline.set(end)
    try:
        yield
    finally:
        _deadline.reset(token)


def _time_left(
    timeout: float | None, expired: type[httpcore.TimeoutException]
) -> float | None:
    end = _deadline.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired("the call's deadline passed")
    return left if timeout is None else min(timeout, left)


@contextlib.contextmanager
def _bounded(
    timeout: float | None, expired: type[httpcore.TimeoutException]
) -> Iterator[float | None]:
    """The timeout to give one operation (``_time_left``); its timeout, when the deadline
    was what cut it short, says so."""
    given = _time_left(timeout, expired)
    try:
        yield given
    except expired as exc:
        if given is not None and given != timeout:
            raise expired("the call's deadline passed") from exc
        raise


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation ends by the deadline (``deadline``)."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _bounded(timeout, httpcore.ReadTimeout) as given:
            return self._stream.read(max_bytes, given)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), WRITE_PIECE_BYTES):
            with _bounded(timeout, httpcore.WriteTimeout) as given:
                self._stream.write(buffer[start : start + WRITE_PIECE_BYTES], given)

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # The handshake is bounded as a whole by its timeout (Python's ssl module).
        with _bounded(timeout, httpcore.ConnectTimeout) as given:
            return _DeadlineStream(
                self._stream.start_tls(ssl_context, server_hostname, given)
            )

    def get_extra_info(self, info: str) -> object:
        return self._stream.get_extra_info(info)


class PinnedBackend(httpcore.NetworkBackend):
    """httpcore's own sync backend, given the checked address to connect to instead of the
    URL's host (which httpcore keeps for TLS and the request)."""

    def __init__(self, resolve: Resolver = system_resolve) -> None:
        self._resolve = resolve
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        # The connect phase as a whole (the lookup, then each address in turn) within the
        # connect timeout and the deadline.
        end = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            remaining = None if end is None else end - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise httpcore.ConnectTimeout(f"no connection to {host} in time")
            return _time_left(remaining, httpcore.ConnectTimeout)

        try:
            addresses = resolve_within(
                host, port, timeout=left(), resolve=self._resolve
            )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"{host} does not resolve: {exc}") from exc
        if not addresses:
            raise httpcore.ConnectError(f"{host} does not resolve: no address")
        networks = denied_networks()
        for address in addresses:
            address_check(host, address, networks)
        failure: Exception | None = None
        for address in addresses:
            try:
                stream = self._backend.connect_tcp(
                    address,
                    port,
                    timeout=left(),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
                continue
            return _DeadlineStream(stream)
        assert failure is not None
        raise failure

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("calls to operator-configured URLs use TCP only")

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class PinnedTransport(httpx.HTTPTransport):
    """httpx's transport with ``PinnedBackend`` under its connection pool. TLS as httpx sets
    it up (``verify``: certifi's roots, or ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set),
    HTTP/1.1, no proxy: a proxy would look the name up itself."""

    def __init__(
        self,
        *,
        resolve: Resolver = system_resolve,
        verify: ssl.SSLContext | bool = True,
        max_keepalive_connections: int = 0,
    ) -> None:
        # httpx.HTTPTransport keeps its pool in ``_pool`` and takes no backend of its own:
        # the pool is made here, as httpx makes it, with the backend.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            max_connections=httpx.Limits().max_connections,
            max_keepalive_connections=max_keepalive_connections,
            network_backend=PinnedBackend(resolve),
        )


_clients: dict[tuple[float, str], httpx.Client] = {}
_clients_lock = threading.Lock()


def client(*, timeout: float, user_agent: str) -> httpx.Client:
    """The process's client for calls to operator-configured URLs (building one costs more
    than a call: its TLS context), made on first use, after a worker's pool has forked:
    ``PinnedTransport``; connect within ``CONNECT_TIMEOUT_SECONDS`` (at most ``timeout``),
    each read and write within ``timeout`` (a call's whole deadline is ``deadline``'s);
    redirects are answers, never followed; no connection kept alive between calls (a stale
    one would make a call fail for no reason); no proxy or ``.netrc`` from the environment."""
    key = (float(timeout), user_agent)
    with _clients_lock:
        made = _clients.get(key)
        if made is None:
            made = httpx.Client(
                transport=PinnedTransport(),
                timeout=httpx.Timeout(
                    connect=min(timeout, CONNECT_TIMEOUT_SECONDS),
                    read=timeout,
                    write=timeout,
                    pool=timeout,
                ),
                follow_redirects=False,
                trust_env=False,
                headers={"User-Agent": user_agent},
            )
            _clients[key] = made
        return made
