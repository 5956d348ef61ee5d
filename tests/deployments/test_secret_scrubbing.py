"""No secret, token or header value sent leaves an outbound call in any text the product keeps
(docs/security.md, "Secrets", "Nothing sent is kept"): a token with a stray character makes
httpx refuse its header with an error that quotes it, a careless server's answer may quote
it, an executor may put it in its own error. The one classification of outcomes, and the
recording of every attempt whatever its executor, scrub it; the job's detail names the class
of failure only. Real calls against real servers in this process; the same through a real
worker: tests/deployments/test_trigger_workers.py."""

from __future__ import annotations

import logging

import pytest

from core.secrets import REDACTED
from deployments import executors, outbound
from deployments.executors import (
    ExecutionResult,
    TriggerCall,
    TriggerExecutor,
    TriggerResult,
)
from deployments.models import Deployment, TriggerAttempt
from deployments.services.attempts import job_run
from deployments.triggers import result_of
from tests.deployments.factories import deployment_body, idempotent_post
from tests.deployments.fake_github import FakeGitHub
from tests.deployments.leaks import STRAY, deployment_records, holding
from tests.deployments.receiver import Receiver

TOKEN = "ghp_scrubbed_0123456789abcdefABCDEF"


def create(api, key: str = "k1") -> Deployment:
    response = idempotent_post(api, "/api/deployments/", deployment_body(), key)
    assert response.status_code == 202, response.content
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def run(job) -> str:
    return job_run(kind="deployment", public_id=job.public_id, worker="w1")


def logged(caplog) -> str:
    """Everything the product logged: the lines as formatted (tracebacks included) and
    every structured field."""
    fields = [repr(record.__dict__) for record in caplog.records]
    return caplog.text + "\n".join(fields)


def refused_header_error(value: str) -> BaseException:
    """What a real call with ``Authorization: value`` raises, against a real server."""
    with Receiver() as receiver:
        try:
            outbound.call(
                outbound.http_client(),
                "POST",
                receiver.url,
                headers={"Authorization": value},
                content=b"{}",
            )
        except Exception as exc:  # what the executors classify
            return exc
    raise AssertionError(f"a header {value!r} was sent")


# --- the classification ---------------------------------------------------------------------


@pytest.mark.parametrize("name", STRAY)
def test_the_classification_keeps_no_token_of_a_refused_header(name):
    token = TOKEN + STRAY[name]
    error = refused_header_error(f"Bearer {token}")
    assert TOKEN in str(error)  # what httpx says, and what used to be kept

    for secrets in ([token], []):  # the call's secret given, or forgotten
        result = result_of(url="https://api.example/x", error=error, secrets=secrets)
        assert result.outcome == "rejected"
        assert result.error_class == "LocalProtocolError"
        assert TOKEN not in result.error
        assert REDACTED in result.error
        assert TOKEN not in result.describe()
        classified = outbound.outcome_classify(error=error, secrets=secrets)
        assert TOKEN not in classified.error


def test_every_form_of_a_secret_is_scrubbed():
    """Raw, stripped, escaped as Python or JSON shows it, percent-encoded."""
    token = TOKEN + "/x\r"
    texts = [
        f"raw {token} here",
        f"stripped {token.strip()} here",
        f"repr {token!r} here",
        f"bytes {token.encode()!r} here",
        'json "ghp_scrubbed_0123456789abcdefABCDEF/x\\r" here',
        "quoted ghp_scrubbed_0123456789abcdefABCDEF%2Fx%0D here",
    ]
    for text in texts:
        error = RuntimeError(text)
        kept = outbound.outcome_classify(error=error, secrets=[token]).error
        assert "ghp_scrubbed" not in kept, kept
        assert kept.endswith(" here"), kept


def test_header_values_sent_are_scrubbed_without_being_named():
    """A header value that is no secret of the call (a signature, say) is scrubbed too: the
    error carries the request it was sent in."""
    signature = "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="
    with Receiver() as receiver:
        try:
            outbound.call(
                outbound.http_client(),
                "POST",
                receiver.url,
                headers={"webhook-signature": signature + "\r"},
                content=b"{}",
            )
        except Exception as exc:  # what the executors classify
            error = exc
    assert "K5oZfzN95Z9UVu1" in str(error)
    kept = outbound.outcome_classify(error=error).error
    assert "K5oZfzN95Z9UVu1" not in kept
    assert REDACTED in kept


# --- the recording of every attempt ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", STRAY)
def test_a_github_token_with_a_stray_character_appears_in_no_record(
    api, settings, caplog, name
):
    """A token saved before stray characters were refused (or in an environment read some
    other way): the job fails, and neither its client, its operators, the log nor a bundle
    ever sees the token."""
    caplog.set_level(logging.INFO)
    with FakeGitHub(token=TOKEN) as github:
        settings.DEPLOY_EXECUTOR = "github"
        settings.GITHUB_API_URL = github.url
        settings.GITHUB_TOKEN = TOKEN + STRAY[name]
        job = create(api)
        assert run(job) == "failed"
    assert github.deployments == []

    records = deployment_records(job, api=api)
    assert records["detail"] == "trigger_rejected: LocalProtocolError"
    [attempt] = TriggerAttempt.objects.filter(job=job)
    assert (attempt.outcome, attempt.error_class) == ("rejected", "LocalProtocolError")
    assert REDACTED in attempt.error  # operators still read what httpx said
    assert holding(records, TOKEN) == []
    assert TOKEN not in logged(caplog)


@pytest.mark.django_db(transaction=True)
def test_a_server_s_answer_quoting_the_token_is_scrubbed(api, settings, caplog):
    """GitHub's one-line message reaches the job's detail; one that quotes the token (a
    careless server at the target's URL) reaches no record with it."""
    caplog.set_level(logging.INFO)
    with FakeGitHub(token="ghp_the_right_one_0123456789") as github:
        github.echo_credentials = True
        settings.DEPLOY_EXECUTOR = "github"
        settings.GITHUB_API_URL = github.url
        settings.GITHUB_TOKEN = TOKEN
        job = create(api)
        assert run(job) == "failed"

    records = deployment_records(job, api=api)
    assert records["detail"].startswith("trigger_rejected: HTTP 401: Bad credentials")
    assert REDACTED in records["detail"]
    assert holding(records, TOKEN) == []
    assert TOKEN not in logged(caplog)


class CarelessExecutor(TriggerExecutor):
    """An executor that puts its secret in what it reports: in its result, or in the
    exception it raises."""

    name = "careless"
    raises = False

    def default_url(self) -> str:
        return "https://ci.example/hook"

    def default_secret(self) -> str:
        return TOKEN

    def trigger(self, call: TriggerCall) -> TriggerResult:
        if self.raises:
            raise RuntimeError(f"could not sign with {call.secret!r} for 10.0.0.5")
        return TriggerResult(
            outcome="rejected",
            error_class="CarelessError",
            error=f"refused: Authorization: Bearer {call.secret}",
            url=f"{call.url}?token={call.secret}",
        )


class RaisingExecutor(CarelessExecutor):
    raises = True


CARELESS = CarelessExecutor()
RAISING = RaisingExecutor()


def exploding(job) -> ExecutionResult:
    raise RuntimeError(f"connect to 10.0.0.5:5432 failed for {TOKEN}")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("executor", "detail"),
    [
        ("careless", "trigger_rejected: CarelessError"),
        ("raising", "trigger_unreachable: 1 attempts, the last: RuntimeError"),
    ],
)
def test_a_new_executor_that_quotes_its_secret_leaks_it_nowhere(
    api, settings, caplog, monkeypatch, executor, detail
):
    """Scrubbing is the recording's, not each executor's to remember."""
    caplog.set_level(logging.INFO)
    settings.DEPLOY_TRIGGER_MAX_ATTEMPTS = 1
    monkeypatch.setitem(
        executors.EXECUTORS,
        executor,
        f"tests.deployments.test_secret_scrubbing.{executor.upper()}",
    )
    settings.DEPLOY_EXECUTOR = executor
    job = create(api)
    assert run(job) == "failed"

    records = deployment_records(job, api=api)
    assert records["detail"] == detail
    assert "10.0.0.5" not in records["detail"]
    assert holding(records, TOKEN) == []
    assert TOKEN not in logged(caplog)


@pytest.mark.django_db(transaction=True)
def test_a_run_executor_s_error_reaches_the_client_as_its_class_only(
    api, settings, caplog, monkeypatch
):
    caplog.set_level(logging.INFO)
    monkeypatch.setitem(
        executors.EXECUTORS,
        "exploding",
        "tests.deployments.test_secret_scrubbing.exploding",
    )
    settings.DEPLOY_EXECUTOR = "exploding"
    settings.GITHUB_TOKEN = TOKEN  # a secret the product knows of
    job = create(api)
    assert run(job) == "failed"

    records = deployment_records(job, api=api)
    assert records["detail"] == "executor error: RuntimeError"
    assert holding(records, TOKEN) == []
    assert "10.0.0.5" not in records["api"]
    text = logged(caplog)
    assert TOKEN not in text
    assert "RuntimeError" in text  # operators still read what went wrong, and where
