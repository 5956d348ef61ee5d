"""A CI/CD system's webhook endpoint, for real: a threaded HTTP server in the test process that
verifies every request with the ``standardwebhooks`` reference library (as Argo Events, a
Jenkins generic webhook or a home-grown deployer would), deduplicates on ``webhook-id``, and
records everything it saw.

A fault plan per ``webhook-id`` says what the next requests of that id meet, one fault per
request, in order (then normal service):

- ``Fault.status(500)`` (503, 422, 408, ...): refused before acting;
- ``Fault.status(429, retry_after=2)``: refused, come back in 2 s;
- ``Fault.drop()``: taken and acted on, then the connection is closed with no answer;
- ``Fault.slow(seconds)``: taken and acted on, answered only after ``seconds`` (past the
  caller's timeout);
- ``Fault.hold()``: taken and acted on, answered only once the test calls ``release()``
  (a worker can be killed meanwhile).

"Acted on" is what a deployment downstream is: a request of an id not yet acted on, that
verified and was not refused. A request of an id already acted on is answered 200 as a
duplicate and not acted on again. ``acted_count(id) > 1`` is two deployments.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.http_double import HttpDouble, Reply, Request

# A test secret (Standard Webhooks' own format: 32 random bytes, base64).
RECEIVER_SECRET = "whsec_0snSPuSyuVpC58vLvZHhJ9zhTQStWIA3kuIC6sLEFjk="


@dataclass(frozen=True)
class Fault:
    kind: str  # status | drop | slow | hold
    code: int = 0
    retry_after: float | None = None
    seconds: float = 0.0

    @classmethod
    def status(cls, code: int, *, retry_after: float | None = None) -> Fault:
        return cls("status", code=code, retry_after=retry_after)

    @classmethod
    def drop(cls) -> Fault:
        return cls("drop")

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        return cls("slow", seconds=seconds)

    @classmethod
    def hold(cls) -> Fault:
        return cls("hold")


@dataclass
class Received:
    webhook_id: str
    verified: bool
    error: str
    request: Request
    fault: Fault | None
    acted: bool

    @property
    def headers(self) -> dict[str, str]:
        return self.request.headers

    @property
    def body(self) -> bytes:
        return self.request.body

    @property
    def path(self) -> str:
        """The request's path and query, as the caller sent them."""
        return self.request.path

    @property
    def at(self) -> float:
        return self.request.at

    @property
    def answered(self) -> int | None:
        """The status sent (None: no answer)."""
        return self.request.answered

    @property
    def message(self) -> dict[str, Any]:
        return json.loads(self.body)


class Receiver:
    def __init__(
        self,
        secret: str = RECEIVER_SECRET,
        *,
        delay: float = 0.0,
        answer: int = 202,
        verify: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.secret = secret
        self.webhook = Webhook(secret)
        self.delay = delay  # every acted-on request takes this long (a slow receiver)
        self.answer = answer
        self.verify = verify
        self.plans: dict[str, list[Fault]] = {}
        self.received: list[Received] = []
        self.acted: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.holding = threading.Event()  # set once a request is held
        # The fault of a request whose id has no plan (None: normal service): chaos.
        self.fault_for: Callable[[str], Fault | None] | None = None
        # Called with the id of every verified request it takes (acted on or a duplicate),
        # outside the lock: a CD system that then reports the job's progress.
        self.on_taken: Callable[[str], None] | None = None
        # The body of every answer to a verified request that is not refused, in place of
        # the run it started (bytes as they are, anything else as JSON).
        self.reply_body: Any = None
        self.http = HttpDouble(self._serve, host=host, port=port)

    @property
    def port(self) -> int:
        return self.http.port

    @property
    def url(self) -> str:
        return f"{self.http.url}/hooks/deploy"

    def __enter__(self) -> Receiver:
        self.http.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
        self.http.__exit__(*exc)

    def plan(self, webhook_id: str, *faults: Fault) -> None:
        with self.lock:
            self.plans.setdefault(webhook_id, []).extend(faults)

    def release(self) -> None:
        self.released.set()

    def requests_for(self, webhook_id: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.webhook_id == webhook_id]

    def acted_count(self, webhook_id: str) -> int:
        with self.lock:
            return self.acted[webhook_id]

    def ids(self) -> set[str]:
        with self.lock:
            return {r.webhook_id for r in self.received}

    # --- serving ---------------------------------------------------------------------

    def _take(self, webhook_id: str, verified: bool) -> tuple[Fault | None, bool]:
        """The fault this request meets, and whether it is acted on (decided at once,
        under the lock: two requests of one id at the same moment act once)."""
        with self.lock:
            plan = self.plans.get(webhook_id) or []
            fault = plan.pop(0) if plan else None
            if fault is None and self.fault_for is not None:
                fault = self.fault_for(webhook_id)
            acts = (
                verified
                and (fault is None or fault.kind != "status")
                and not self.acted[webhook_id]
            )
            if acts:
                self.acted[webhook_id] += 1
            return fault, acts

    def _serve(self, request: Request) -> Reply | None:
        webhook_id = request.headers.get("webhook-id", "")
        verified, error = True, ""
        if self.verify:
            try:
                self.webhook.verify(request.body, request.headers)
            except WebhookVerificationError as exc:
                verified, error = False, str(exc)
        fault, acted = self._take(webhook_id, verified)
        with self.lock:
            self.received.append(
                Received(webhook_id, verified, error, request, fault, acted)
            )
        if not verified:
            return Reply(401, {"error": "unverified"})
        if fault is not None and fault.kind == "status":
            extra = {}
            if fault.retry_after is not None:
                extra["Retry-After"] = f"{fault.retry_after:g}"
            return Reply(fault.code, {"error": "fault"}, extra)
        if self.on_taken is not None:
            self.on_taken(webhook_id)
        if acted and self.delay:
            time.sleep(self.delay)
        if fault is not None and fault.kind == "drop":
            return None
        if fault is not None and fault.kind == "slow":
            time.sleep(fault.seconds)
        if fault is not None and fault.kind == "hold":
            self.holding.set()
            self.released.wait(timeout=120)
        if self.reply_body is not None:
            return Reply(self.answer if acted else 200, self.reply_body)
        run = self.run_of(webhook_id)
        if acted:
            return Reply(self.answer, {"accepted": webhook_id, **run})
        return Reply(200, {"duplicate": webhook_id, **run})

    def run_of(self, webhook_id: str) -> dict[str, str]:
        """What a receiver that deduplicates answers for an id, the first time and on every
        duplicate: the run it started (docs/http-api.md, "What a trigger started")."""
        return {"id": f"run-{webhook_id}", "url": f"{self.http.url}/runs/{webhook_id}"}


def closed_port_url() -> str:
    """A URL on which nothing listens: the connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/deploy"
