import functools
import ipaddress

from django.conf import settings
from django.http import HttpRequest

# An IPv6 host is routinely given a whole /64 (SLAAC, privacy addresses): every address in it
# is one client for throttling, or it could take a fresh address for every guess.
IPV6_CLIENT_PREFIX = 64


def client_ip(request: HttpRequest) -> str | None:
    """The client's address for throttling. Each of the TRUSTED_PROXY_COUNT proxies in front
    appends the address it saw to X-Forwarded-For, so the client is that many entries from the
    right; anything further left was written by the client and is not trusted. An IPv6
    address stands for its /64, written as the network's first address (``2001:db8:1:2::``:
    axes stores it as an address), an IPv4-mapped one for its IPv4 address."""
    peer = request.META.get("REMOTE_ADDR")
    hops = settings.TRUSTED_PROXY_COUNT
    if hops:
        forwarded = [
            part.strip()
            for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
            if part.strip()
        ]
        if len(forwarded) >= hops:
            peer = forwarded[-hops]
    return client_key(peer)


# Requests come from a bounded set of addresses (producers, proxies, operators): each is
# parsed once while it stays among the last 4,096 seen, not on every request.
@functools.lru_cache(maxsize=4096)
def client_key(address: str | None) -> str | None:
    """What throttling counts an address as (see ``client_ip``); an unparsable one as it is."""
    if not address:
        return address
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if parsed.version == 6 and parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    if parsed.version == 6:
        network = ipaddress.ip_network(f"{parsed}/{IPV6_CLIENT_PREFIX}", strict=False)
        return str(network.network_address)
    return str(parsed)
