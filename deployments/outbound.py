"""Outbound calls of the trigger executors (docs/subsystems/executors.md, "Outbound calls"): how a
call is made (``core.egress``: to a checked address of the URL's host, never one in a denied
network; explicit connect and read timeouts and one deadline for the whole attempt; no
redirects; a bounded response), and the one classification of what came back.

Every attempt ends in one of the ``TriggerAttempt.Outcome`` values, decided here only:

- ``delivered``: a 2xx answer.
- ``transient``: nothing was acted on and a retry may help: the connection was refused or
  never made (a name that does not resolve included), 408, 425, 429, 503, a GitHub rate
  limit (403 with ``Retry-After`` or no requests left). ``Retry-After`` (seconds or an
  HTTP date) and GitHub's ``x-ratelimit-reset`` say when.
- ``ambiguous``: the request may have been acted on: the connection dropped after it was
  sent, no whole answer within the attempt's deadline, any other 5xx. Retried under the
  same id; the ``github`` executor looks its deployment up before it creates again.
- ``rejected``: a permanent refusal: any other 4xx, a redirect (never followed), a URL that
  cannot be called or lies in a denied network.

What is kept of an error's text holds no secret (docs/security.md, "Secrets"): every form of
the call's secrets, of the values of the headers the failed request carried and of the
secret settings is scrubbed from it (``error_kept``).
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
from django.conf import settings

from core import egress
from core.egress import DeniedDestination as DeniedDestination
from core.egress import destination_check as destination_check
from core.secrets import secrets_scrubbed, settings_secrets
from core.tracing import headers_inject

from .models import TriggerAttempt

Outcome = TriggerAttempt.Outcome

USER_AGENT = "retrysafe-deployments/1"
# A trigger's answer is read up to this size (GitHub's JSON included); the rest is dropped.
MAX_RESPONSE_BYTES = 1024 * 1024

TRANSIENT_STATUSES = frozenset({408, 425, 429, 503})
_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.ConnectError,  # refused, no route, DNS, TLS handshake: nothing was sent
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,
)
_REJECTED_ERRORS: tuple[type[BaseException], ...] = (
    httpx.UnsupportedProtocol,
    httpx.InvalidURL,
    httpx.LocalProtocolError,  # the request itself cannot be sent as built
)


@dataclass(frozen=True)
class Answer:
    status_code: int
    headers: httpx.Headers
    body: bytes = b""


@dataclass(frozen=True)
class Classified:
    outcome: str
    status_code: int | None = None
    error_class: str = ""
    error: str = ""
    retry_after: float | None = None


def http_client() -> httpx.Client:
    """The process's client for trigger attempts (``core.egress.client``): connect within
    5 s (at most ``DEPLOY_HTTP_TIMEOUT_SECONDS``), each read and write within
    ``DEPLOY_HTTP_TIMEOUT_SECONDS``, to a checked address; redirects are answers, never
    followed; no connection kept alive between attempts."""
    return egress.client(
        timeout=float(settings.DEPLOY_HTTP_TIMEOUT_SECONDS), user_agent=USER_AGENT
    )


@contextlib.contextmanager
def attempt_deadline() -> Iterator[None]:
    """One attempt's deadline: every request made within it (a GitHub attempt's lookup
    pages and its create) ends ``DEPLOY_HTTP_TIMEOUT_SECONDS`` from now at the latest,
    connect, send, answer and body together."""
    with egress.deadline(float(settings.DEPLOY_HTTP_TIMEOUT_SECONDS)):
        yield


def call(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    content: bytes | None = None,
    params: Mapping[str, str] | None = None,
    read_body: bool = False,
) -> Answer:
    """One request, within ``attempt_deadline`` (the attempt's, when it is part of one),
    connected to a checked address of the URL's host (``core.egress``: a URL that is not
    http(s), or whose host is or resolves to a denied address, raises
    ``DeniedDestination`` with nothing sent); the body of the answer is read (up to
    ``MAX_RESPONSE_BYTES``) only when asked. Raises what httpx raises."""
    egress.url_origin(url)
    sent = dict(headers)
    # Tracing: the attempt's context goes downstream (the http executor's signed POST, the
    # GitHub API's calls), whether or not httpx's instrumentation reaches this client.
    headers_inject(sent)
    with (
        attempt_deadline(),
        client.stream(
            method, url, headers=sent, content=content, params=params
        ) as response,
    ):
        body = b""
        if read_body:
            chunks = []
            size = 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size >= MAX_RESPONSE_BYTES:
                    break
            body = b"".join(chunks)[:MAX_RESPONSE_BYTES]
        return Answer(
            status_code=response.status_code, headers=response.headers, body=body
        )


def retry_after_seconds(
    headers: Mapping[str, str] | None, *, now: datetime | None = None
) -> float | None:
    """When the answer says to come back, in seconds from now: ``Retry-After`` (seconds or
    an HTTP date), else GitHub's ``x-ratelimit-reset`` (epoch seconds) when no request is
    left. ``None`` when it says nothing readable."""
    if not headers:
        return None
    now = now or datetime.now(UTC)
    value = (headers.get("retry-after") or "").strip()
    if value:
        if value.isdigit():
            return float(value)
        try:
            moment = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            moment = None
        if moment is not None:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return max((moment - now).total_seconds(), 0.0)
    if (headers.get("x-ratelimit-remaining") or "").strip() == "0":
        reset = (headers.get("x-ratelimit-reset") or "").strip()
        if reset.isdigit():
            return max(int(reset) - now.timestamp(), 0.0)
    return None


def _rate_limited(headers: Mapping[str, str]) -> bool:
    """GitHub's rate limits answer 403 (or 429) with ``Retry-After`` or no request left."""
    return bool(headers.get("retry-after")) or (
        (headers.get("x-ratelimit-remaining") or "").strip() == "0"
    )


# Headers the HTTP client sets itself, which carry no credential: left in an error's text.
FRAMING_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "connection",
        "content-length",
        "content-type",
        "host",
        "transfer-encoding",
        "user-agent",
    }
)
# How far down an exception's causes the headers of its request are looked for.
_CHAIN_DEPTH = 8


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what caused it (``raise ... from``, or raised while handling)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < _CHAIN_DEPTH:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def sent_header_values(error: BaseException) -> list[str]:
    """The values of the headers the failed request carried (httpx attaches the request to
    its errors), the client's own framing headers apart: an ``Authorization``, a
    signature, whatever an executor sent."""
    values: list[str] = []
    for link in _chain(error):
        try:
            request = link.request  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):  # httpx's, before a request is attached
            continue
        if isinstance(request, httpx.Request):
            values.extend(
                value
                for name, value in request.headers.items()
                if name.lower() not in FRAMING_HEADERS
            )
    return values


def _known_secrets(error: BaseException, secrets: Iterable[str]) -> list[str]:
    return [*secrets, *sent_header_values(error), *settings_secrets()]


def error_kept(error: BaseException, *, secrets: Iterable[str] = ()) -> str:
    """What is kept of ``error``'s text (at most 400 characters; its class when it says
    nothing): every form of ``secrets`` (the call's), of the header values its request
    carried and of the secret settings scrubbed before it is cut."""
    text = secrets_scrubbed(str(error), _known_secrets(error, secrets))
    return text[:400] or type(error).__name__


def traceback_kept(error: BaseException, *, secrets: Iterable[str] = ()) -> str:
    """``error``'s traceback, causes included, scrubbed as ``error_kept`` scrubs: what a
    log line may carry of an unforeseen failure (a traceback quotes the message of every
    exception in the chain)."""
    text = "".join(traceback.format_exception(error))
    return secrets_scrubbed(text, _known_secrets(error, secrets))


def outcome_classify(
    *,
    status_code: int | None = None,
    headers: Mapping[str, str] | None = None,
    error: BaseException | None = None,
    secrets: Iterable[str] = (),
    now: datetime | None = None,
) -> Classified:
    """The one classification of an attempt's end: an answer (``status_code`` and its
    ``headers``) or the exception the call raised (module docstring), whose text is kept
    without ``secrets`` (the call's secret or token) or anything else it sent
    (``error_kept``)."""
    if error is not None:
        error_class = type(error).__name__
        text = error_kept(error, secrets=secrets)
        if isinstance(error, (DeniedDestination, *_REJECTED_ERRORS)):
            return Classified(Outcome.REJECTED, error_class=error_class, error=text)
        if isinstance(error, _TRANSIENT_ERRORS):
            return Classified(Outcome.TRANSIENT, error_class=error_class, error=text)
        # A read or write that failed or timed out, a connection dropped after the request
        # left, or anything unforeseen: the receiver may have acted on it.
        return Classified(Outcome.AMBIGUOUS, error_class=error_class, error=text)
    if status_code is None:
        raise ValueError("an answer's status code, or the error of a call")
    headers = headers or {}
    if 200 <= status_code < 300:
        return Classified(Outcome.DELIVERED, status_code=status_code)
    if status_code in TRANSIENT_STATUSES or (
        status_code == 403 and _rate_limited(headers)
    ):
        return Classified(
            Outcome.TRANSIENT,
            status_code=status_code,
            retry_after=retry_after_seconds(headers, now=now),
        )
    if status_code >= 500 or status_code < 200:
        return Classified(Outcome.AMBIGUOUS, status_code=status_code)
    if 300 <= status_code < 400:
        return Classified(
            Outcome.REJECTED,
            status_code=status_code,
            error="a redirect (redirects are not followed)",
        )
    return Classified(Outcome.REJECTED, status_code=status_code)
