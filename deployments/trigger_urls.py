"""Trigger URLs as the product records and shows them (docs/security.md, "Deploy targets"):
a URL called by a trigger may carry a credential in its query (a Jenkins remote trigger's
``?token=``), which the call needs and no record keeps; a URL with user information
(``https://user:password@host/``) is refused wherever one is set."""

from __future__ import annotations

import hashlib
from urllib.parse import urlsplit, urlunsplit


def url_shown(url: str) -> str:
    """A URL as attempts, logs, operator actions and the admin show it: no user info, no
    query (a Jenkins token, say), no fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal keeps its brackets
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))[:500]


def url_query_fingerprint(url: str) -> str:
    """What records keep of a URL's query: ``sha256:`` and 12 hex digits, as secrets are
    shown (enough to tell a change); ``""`` when it has none."""
    query = urlsplit(url).query
    if not query:
        return ""
    return "sha256:" + hashlib.sha256(query.encode()).hexdigest()[:12]


def url_scheme_errors(url: str) -> list[str]:
    """An http(s) URL with a host, or the reason it is not; the message never repeats the
    URL (a query may hold a token)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ["Not a URL."]
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ["Not an http(s) URL with a host."]
    return []


def url_credential_errors(url: str) -> list[str]:
    """What is wrong with ``url`` as a trigger's URL on the score of credentials: user
    information is refused (a password in a URL is stored whole, and sent as Basic auth to
    wherever the URL points). The message never repeats the URL."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []  # not a URL at all: the URL checks say so
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return [
            "A URL with user information (user:password@) is refused: a receiver "
            "that needs a token takes it in the URL's query, which no record keeps."
        ]
    return []
