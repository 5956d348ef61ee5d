"""The ``http`` executor: one Standard Webhooks message per job to a CI/CD system
(docs/http-api.md, "Executors").

The message is signed by ``core.signing``, the Standard Webhooks signing the inbox's own
scheme uses too, so any receiver verifies it with the ``standardwebhooks`` library (or any
implementation of the scheme). Its ``webhook-id`` and ``Idempotency-Key`` are the job's
public id on every attempt, and its body is the same bytes on every attempt (the job as it
was claimed): only ``webhook-timestamp`` and the signature change. A receiver deduplicates on
``webhook-id``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import replace

from django.conf import settings

from core.signing import standard_webhooks_sign, whsec_problem

from . import outbound
from .downstream import downstream_of_answer
from .executors import TriggerCall, TriggerExecutor, TriggerResult
from .models import Job, TriggerAttempt
from .representations import job_representation

Outcome = TriggerAttempt.Outcome
MESSAGE_TYPES = {"deployment": "deployment.requested", "build": "build.requested"}


def _rfc3339(moment) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def trigger_message(*, job: Job, kind: str) -> bytes:
    """The body every attempt for ``job`` sends: ``{"type", "timestamp", "data"}``, the
    timestamp being when the job was requested and ``data`` the job as the API answers it."""
    message = {
        "type": MESSAGE_TYPES[kind],
        "timestamp": _rfc3339(job.created_at),
        "data": job_representation(job),
    }
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


def signed_headers(*, body: bytes, secret: str, message_id: str) -> dict[str, str]:
    """The Standard Webhooks headers of ``body`` now, and the idempotency key (the id)."""
    headers = standard_webhooks_sign(
        body=body, secret=secret, message_id=message_id, timestamp=int(time.time())
    )
    headers["Idempotency-Key"] = message_id
    headers["Content-Type"] = "application/json"
    return headers


def result_of(
    *,
    url: str,
    secrets: Iterable[str],
    answer: outbound.Answer | None = None,
    error: BaseException | None = None,
) -> TriggerResult:
    """The classified outcome of one call to ``url``: its ``answer``, or the ``error`` it
    raised. ``secrets`` (the call's secret or token; required, so that no caller forgets
    them) and every header value the call sent are scrubbed from what is kept of an error
    (``outbound.error_kept``)."""
    secrets = list(secrets)
    classified = (
        outbound.outcome_classify(
            status_code=answer.status_code, headers=answer.headers
        )
        if answer is not None
        else outbound.outcome_classify(error=error, secrets=secrets)
    )
    return TriggerResult(
        outcome=classified.outcome,
        status_code=classified.status_code,
        error_class=classified.error_class,
        error=classified.error,
        retry_after=classified.retry_after,
        url=url,
    ).scrubbed(secrets)


def post_signed(
    *, url: str, secret: str, message_id: str, body: bytes, read_answer: bool = False
) -> TriggerResult:
    """One signed POST of ``body`` to ``url``, classified; with ``read_answer``, what a 2xx
    answer says the receiver started (its ``downstream``)."""
    headers = signed_headers(body=body, secret=secret, message_id=message_id)
    try:
        answer = outbound.call(
            outbound.http_client(),
            "POST",
            url,
            headers=headers,
            content=body,
            read_body=read_answer,
        )
    except Exception as exc:  # classified: every failure of the call is an outcome
        return result_of(url=url, error=exc, secrets=[secret])
    result = result_of(url=url, answer=answer, secrets=[secret])
    if read_answer and result.outcome == Outcome.DELIVERED:
        # Scrubbed with the rest of the result where every attempt is recorded
        # (``TriggerResult.scrubbed``).
        result = replace(result, downstream=downstream_of_answer(answer.body))
    return result


class HttpExecutor(TriggerExecutor):
    name = "http"

    def default_url(self) -> str:
        return settings.DEPLOY_HTTP_URL

    def default_secret(self) -> str:
        return settings.DEPLOY_HTTP_SECRET

    def config_errors(self, *, url: str, secret: str) -> dict[str, list[str]]:
        errors: dict[str, list[str]] = {}
        if not (url or self.default_url()):
            errors["url"] = ["The receiver's URL is required (or DEPLOY_HTTP_URL)."]
        secret = secret or self.default_secret()
        if not secret:
            errors["secret"] = ["A whsec_ secret is required (or DEPLOY_HTTP_SECRET)."]
        elif whsec_problem(secret):
            errors["secret"] = ["A Standard Webhooks secret: whsec_<base64>."]
        return errors

    def trigger(self, call: TriggerCall) -> TriggerResult:
        return post_signed(
            url=call.url,
            secret=call.secret,
            message_id=call.job.public_id,
            body=trigger_message(job=call.job, kind=call.kind),
            read_answer=True,
        )


HTTP = HttpExecutor()
