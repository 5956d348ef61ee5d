from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str | None:
    """The client's address for throttling. Each of the TRUSTED_PROXY_COUNT proxies in front
    appends the address it saw to X-Forwarded-For, so the client is that many entries from the
    right; anything further left was written by the client and is not trusted."""
    peer = request.META.get("REMOTE_ADDR")
    hops = settings.TRUSTED_PROXY_COUNT
    if not hops:
        return peer
    forwarded = [
        part.strip()
        for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if part.strip()
    ]
    return forwarded[-hops] if len(forwarded) >= hops else peer
