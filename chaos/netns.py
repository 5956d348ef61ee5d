"""The network of a cluster run (chaos.cluster), made by the run on this machine and torn down
at its end: a network namespace per host, each joined by a veth pair to a router of its own
namespace, on a /24 of ``10.213.0.0/16`` that no route or address of this machine covers, and a
link from the root namespace (where the load runs) to the router.

- A partition is a routing rule of the router that drops, silently, what one host sends the
  other (or what a host sends or is sent): the hosts' own stacks see nothing, as when a
  network between them loses every packet. No ICMP answers, nothing refused: a connection
  waits for its timeouts, which is what the product has to bound.
- A slow link is a token bucket (``tc`` ``tbf``) at both ends of a host's link.
- A host killed is every process of its namespace killed at once (``ip netns pids``).

Every name the run makes starts with its prefix, ``rsc<pid>-`` (``rsc`` for this tool, then
the run's process id): a run addresses only its own namespaces and link, and
``stale_cleanup`` removes only those of runs whose process is gone. Needs root and iproute2;
no netfilter (this kernel has neither nft nor iptables, nor ``netem``)."""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import itertools
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

RANGE = ipaddress.IPv4Network("10.213.0.0/16")
# rsc<pid>-<host>: this tool's names, and the process that made them.
PREFIX = re.compile(r"^rsc(\d+)-")
ROUTER = "net"
LOAD_LINK = "ld"
CLONE_NEWNET = 0x40000000


class NetworkError(RuntimeError):
    pass


def ip(*args: str, check: bool = True) -> str:
    result = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=30, check=False
    )
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def tc(*args: str, check: bool = True) -> None:
    result = subprocess.run(
        ["tc", *args], capture_output=True, text=True, timeout=30, check=False
    )
    if check and result.returncode != 0:
        raise NetworkError(f"tc {' '.join(args)}: {result.stderr.strip()}")


def usable() -> str | None:
    """Why this machine cannot run the cluster (None: it can): root and ``ip netns``."""
    if os.geteuid() != 0:
        return (
            "the cluster run makes network namespaces and must run as root "
            f"(this process runs as uid {os.geteuid()})"
        )
    try:
        ip("netns", "list")
    except (OSError, NetworkError) as exc:
        return f"`ip netns` does not work here: {exc}"
    return None


def machine_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine routes or has an address in (the default route
    aside): a run's /24 must overlap none of them."""
    networks = []
    for route in json.loads(ip("-4", "-j", "route", "show", "table", "all") or "[]"):
        if route.get("dst", "default") != "default":
            networks.append(ipaddress.IPv4Network(route["dst"], strict=False))
    for link in json.loads(ip("-4", "-j", "addr", "show") or "[]"):
        for address in link.get("addr_info", []):
            networks.append(
                ipaddress.IPv4Network(
                    f"{address['local']}/{address['prefixlen']}", strict=False
                )
            )
    return networks


def subnet_choose(
    run_id: int, wanted: ipaddress.IPv4Network | None = None
) -> ipaddress.IPv4Network:
    """``wanted``, or the first /24 of RANGE from one the run's id picks, that overlaps
    nothing this machine routes (another run's /24 included); refused when there is none."""
    taken = machine_networks()

    def free(network: ipaddress.IPv4Network) -> bool:
        return not any(network.overlaps(other) for other in taken)

    if wanted is not None:
        if wanted.prefixlen > 26 or not free(wanted):
            raise NetworkError(
                f"{wanted} overlaps a route or an address of this machine "
                "(see `ip route show table all`), or is smaller than a /26"
            )
        return wanted
    subnets = list(RANGE.subnets(new_prefix=24))[1:-1]
    start = run_id % len(subnets)
    for network in subnets[start:] + subnets[:start]:
        if free(network):
            return network
    raise NetworkError(
        f"every /24 of {RANGE} overlaps a route or an address of this machine: "
        "choose a free range with --subnet"
    )


def process_running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def namespaces() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line]


def namespace_pids(name: str) -> list[int]:
    return [int(pid) for pid in ip("netns", "pids", name, check=False).split()]


def namespace_kill(name: str, timeout: float = 20) -> None:
    """Every process of namespace ``name`` killed at once, then waited for."""
    deadline = time.monotonic() + timeout
    while pids := namespace_pids(name):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise NetworkError(f"processes of {name} outlived SIGKILL: {pids}")
        time.sleep(0.1)


def stale_cleanup() -> list[str]:
    """Removes the namespaces and root links of earlier runs of this tool whose process is
    gone (a run killed with SIGKILL cannot tear down): only names with this tool's prefix,
    only of a dead owner. Returns what it removed."""
    removed = []
    # The load's links first: deleting the router's namespace would take them away unseen.
    for link in json.loads(ip("-j", "link", "show") or "[]"):
        match = PREFIX.match(link["ifname"])
        if match and not process_running(int(match[1])):
            ip("link", "del", link["ifname"], check=False)
            removed.append(link["ifname"])
    for name in namespaces():
        match = PREFIX.match(name)
        if match and not process_running(int(match[1])):
            namespace_kill(name)
            ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


@contextlib.contextmanager
def thread_inside(name: str) -> Iterator[None]:
    """The calling thread inside network namespace ``name`` (another thread's sockets stay
    where they are), and back at the end. Sockets made inside belong to that namespace for
    good, and so do the threads started inside: a server started here serves there."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)
        os.close(target)


class Network:
    """The run's namespaces: ``hosts`` maps each host's name to the last octet of its
    address in ``subnet``; the router is .1, the root namespace's end of the load's link .2."""

    def __init__(
        self, run_id: int, subnet: ipaddress.IPv4Network, hosts: dict[str, int]
    ):
        self.prefix = f"rsc{run_id}"
        self.subnet = subnet
        self.hosts = dict(hosts)
        self.router_address = str(subnet.network_address + 1)
        self.load_address = str(subnet.network_address + 2)
        self.load_link = f"{self.prefix}-{LOAD_LINK}"
        self._priorities = itertools.count(1000)
        self.made: list[str] = []

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def address(self, host: str) -> str:
        return str(self.subnet.network_address + self.hosts[host])

    def inside(self, host: str) -> list[str]:
        """The command prefix that runs a command on ``host``."""
        return ["ip", "netns", "exec", self.ns(host)]

    # --- building and tearing down ------------------------------------------------------

    def build(self) -> None:
        router = self.ns(ROUTER)
        self._namespace(router)
        subprocess.run(
            [
                *self.inside(ROUTER),
                "sh",
                "-c",
                "echo 1 > /proc/sys/net/ipv4/ip_forward",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        for host in self.hosts:
            ns = self.ns(host)
            self._namespace(ns)
            # One veth pair, made in place: eth0 on the host, the host's name on the router.
            ip(
                *("link", "add", "name", "eth0", "netns", ns, "type", "veth"),
                *("peer", "name", host, "netns", router),
            )
            self._attach(ns, "eth0", self.address(host))
            self._attach(router, host, self.router_address)
            ip("-n", router, "route", "add", f"{self.address(host)}/32", "dev", host)
            self._route_through_router(ns, "eth0")
        ip(
            *("link", "add", "name", self.load_link, "type", "veth"),
            *("peer", "name", LOAD_LINK, "netns", router),
        )
        self._attach(None, self.load_link, self.load_address)
        self._attach(router, LOAD_LINK, self.router_address)
        ip("-n", router, "route", "add", f"{self.load_address}/32", "dev", LOAD_LINK)
        self._route_through_router(None, self.load_link)

    def _namespace(self, ns: str) -> None:
        ip("netns", "add", ns)
        self.made.append(ns)
        ip("-n", ns, "link", "set", "dev", "lo", "up")

    @staticmethod
    def _in(ns: str | None) -> tuple[str, ...]:
        return ("-n", ns) if ns else ()

    def _attach(self, ns: str | None, device: str, address: str) -> None:
        ip(*self._in(ns), "addr", "add", f"{address}/32", "dev", device)
        ip(*self._in(ns), "link", "set", "dev", device, "up")

    def _route_through_router(self, ns: str | None, device: str) -> None:
        ip(*self._in(ns), "route", "add", f"{self.router_address}/32", "dev", device)
        ip(
            *self._in(ns),
            *("route", "add", str(self.subnet), "via", self.router_address),
            *("dev", device),
        )

    def teardown(self) -> None:
        """Every process of the run's namespaces killed, the namespaces and the load's link
        deleted: whatever happened, only what this run made."""
        for ns in reversed(self.made):
            with contextlib.suppress(NetworkError):
                namespace_kill(ns)
            ip("netns", "del", ns, check=False)
        self.made.clear()
        ip("link", "del", self.load_link, check=False)

    # --- faults -------------------------------------------------------------------------

    def _drop(self, *selector: str) -> int:
        priority = next(self._priorities)
        ip(
            *("-n", self.ns(ROUTER), "rule", "add", *selector),
            *("blackhole", "priority", str(priority)),
        )
        return priority

    def cut(self, one: str, other: str) -> list[int]:
        """Nothing passes between hosts ``one`` and ``other`` (either way) until ``heal``
        is given what this returns."""
        a, b = self.address(one), self.address(other)
        return [self._drop("from", a, "to", b), self._drop("from", b, "to", a)]

    def isolate(self, host: str) -> list[int]:
        """Nothing passes to or from ``host`` (the load's link included)."""
        address = self.address(host)
        return [self._drop("from", address), self._drop("to", address)]

    def heal(self, rules: list[int]) -> None:
        for priority in rules:
            ip("-n", self.ns(ROUTER), "rule", "del", "priority", str(priority))

    def _ends(self, host: str) -> list[tuple[str, str]]:
        return [(self.ns(ROUTER), host), (self.ns(host), "eth0")]

    def limit(self, host: str, rate: str) -> None:
        """``host``'s link carries ``rate`` each way (a token bucket at both ends)."""
        for ns, device in self._ends(host):
            tc(
                *("-n", ns, "qdisc", "replace", "dev", device, "root", "tbf"),
                *("rate", rate, "burst", "16kb", "latency", "400ms"),
            )

    def unlimit(self, host: str) -> None:
        for ns, device in self._ends(host):
            tc("-n", ns, "qdisc", "del", "dev", device, "root")

    def kill(self, host: str) -> None:
        namespace_kill(self.ns(host))
