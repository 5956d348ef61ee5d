"""The registry of deployment and build executors (docs/http-api.md, "Executors"): a deploy
target, or ``DEPLOY_EXECUTOR`` for the jobs no target routes, names one.

An executor is one of three modes:

- **run** (``simulated``): ``run(job) -> ExecutionResult`` does the work of a claimed job
  outside any transaction, at most once per job; its result ends the job. A plain function
  ``(job) -> ExecutionResult`` in the registry is a run executor.
- **external**: the work is done elsewhere, and reported through ``/api/status-sync/`` or
  GitHub's ``deployment_status`` deliveries. The worker calls nothing: the job stays
  ``queued`` until the first report moves it.
- **trigger** (``http``, ``github``): ``trigger(call) -> TriggerResult`` makes one attempt to
  hand the job to the system that carries it out, always under the job's one id. The worker
  records each attempt before it is made and its outcome after (``TriggerAttempt``),
  retries what a retry may fix, and a 2xx moves the job to ``running``; the downstream then
  reports its progress.

Adding an executor is one class (or function) and one line in ``EXECUTORS``: deploy targets'
choices read the registry, so no migration is needed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

from django.conf import settings
from django.utils.module_loading import import_string

from core.secrets import secrets_scrubbed, settings_secrets

from .downstream import Downstream, downstream_make
from .trigger_urls import url_credential_errors, url_scheme_errors

if TYPE_CHECKING:
    from .models import Job

EXECUTORS: dict[str, str] = {
    "simulated": "deployments.executors.SIMULATED",
    "external": "deployments.executors.EXTERNAL",
    "http": "deployments.triggers.HTTP",
    "github": "deployments.github.GITHUB",
    "github-actions": "deployments.github_actions.GITHUB_ACTIONS",
}


class ExecutorMode(StrEnum):
    RUN = "run"
    EXTERNAL = "external"
    TRIGGER = "trigger"


@dataclass(frozen=True)
class ExecutionResult:
    succeeded: bool
    detail: str = ""


@dataclass(frozen=True)
class TriggerCall:
    """What one trigger attempt is asked to do: the job (as claimed), which attempt this is,
    where to and with what secret (the target's, else the executor's defaults), and whether
    an earlier attempt may have been acted on without our knowing (``look_up_first``: a
    GitHub deployment may exist already)."""

    job: Job
    attempt: int
    url: str
    secret: str = field(repr=False)  # never in a repr, a log line or an error report
    look_up_first: bool = False

    @property
    def kind(self) -> str:
        """The job's kind: the one job table holds it on the job itself."""
        return self.job.kind


@dataclass(frozen=True)
class TriggerResult:
    """What one attempt came to, classified once (``outbound.outcome_classify``):
    ``outcome`` is a ``TriggerAttempt.Outcome`` value."""

    outcome: str
    status_code: int | None = None
    error_class: str = ""
    error: str = ""
    retry_after: float | None = None
    url: str = ""
    github_deployment_id: int | None = None
    github_commit_sha: str = ""
    # What a delivered attempt started downstream (``deployments.downstream``).
    downstream: Downstream | None = None

    def describe(self) -> str:
        """One line for operators (an attempt's admin page, "Send test trigger"):
        ``HTTP 503``, ``HTTP 422: <GitHub's message>``, ``ConnectError: <its text>``."""
        if self.status_code is not None:
            text = f"HTTP {self.status_code}"
            return f"{text}: {self.error}" if self.error else text
        if self.error_class:
            return (
                f"{self.error_class}: {self.error}" if self.error else self.error_class
            )
        return self.error or self.outcome

    def reason(self) -> str:
        """One line for the job's detail, which the job's API client reads: the class of
        failure, never its text (a resolved address, a socket error: those stay on the
        attempt, for operators), and no URL. ``HTTP 503``, ``HTTP 401: <GitHub's one-line
        message>``, ``ConnectError``, ``DeniedDestination`` (docs/security.md, "Error
        text")."""
        if self.status_code is not None:
            text = f"HTTP {self.status_code}"
            message = " ".join(self.error.split())
            return f"{text}: {message}" if message else text
        if self.error_class:
            return self.error_class
        return " ".join(self.error.split()) or self.outcome

    def scrubbed(self, secrets: Iterable[str]) -> TriggerResult:
        """This result with every form of ``secrets`` (the call's secret or token) and of
        the secret settings taken out of its texts: what is recorded of every attempt,
        whatever its executor put in it (docs/security.md, "Secrets")."""
        known = [*secrets, *settings_secrets()]
        return replace(
            self,
            error=secrets_scrubbed(self.error, known),
            error_class=secrets_scrubbed(self.error_class, known),
            url=secrets_scrubbed(self.url, known),
            downstream=_downstream_scrubbed(self.downstream, known),
        )


def _downstream_scrubbed(
    downstream: Downstream | None, known: list[str]
) -> Downstream | None:
    """A downstream without any value that quotes a secret: a receiver's id or link that
    echoes one is not kept at all (a partial id is no id)."""
    if downstream is None:
        return None
    kept = {}
    for key in ("id", "url"):
        value = downstream[key]
        if isinstance(value, str) and secrets_scrubbed(value, known) != value:
            value = None
        kept[key] = value
    return downstream_make(system=downstream["system"], id=kept["id"], url=kept["url"])


class Executor:
    """What every executor has: its registry name and its mode."""

    name: str = ""
    mode: ClassVar[ExecutorMode]
    # The job kinds it can carry out.
    kinds: ClassVar[frozenset[str]] = frozenset({"deployment", "build"})

    def config_errors(self, *, url: str, secret: str) -> dict[str, list[str]]:
        """What is wrong with a target's URL and secret for this executor (none: valid),
        field by field; empty values fall back to the executor's own settings."""
        return {}


class RunExecutor(Executor):
    mode = ExecutorMode.RUN

    def run(self, job: Job) -> ExecutionResult:
        raise NotImplementedError


class ExternalExecutor(Executor):
    """Calls nothing: another system carries the job out and reports it."""

    name = "external"
    mode = ExecutorMode.EXTERNAL


class TriggerExecutor(Executor):
    mode = ExecutorMode.TRIGGER

    def default_url(self) -> str:
        return ""

    def default_secret(self) -> str:
        return ""

    def trigger(self, call: TriggerCall) -> TriggerResult:
        raise NotImplementedError


class SimulatedExecutor(RunExecutor):
    """Sleeps ``DEPLOY_SIMULATED_SECONDS`` and fails with ``DEPLOY_SIMULATED_FAILURE_RATE``."""

    name = "simulated"

    def run(self, job: Job) -> ExecutionResult:
        time.sleep(settings.DEPLOY_SIMULATED_SECONDS)
        if random.random() < settings.DEPLOY_SIMULATED_FAILURE_RATE:
            return ExecutionResult(succeeded=False, detail="simulated failure")
        return ExecutionResult(succeeded=True, detail="simulated")


class FunctionExecutor(RunExecutor):
    """A plain function ``(job) -> ExecutionResult`` in the registry."""

    def __init__(self, name: str, function: Callable[[Job], ExecutionResult]) -> None:
        self.name = name
        self.function = function

    def run(self, job: Job) -> ExecutionResult:
        return self.function(job)


SIMULATED = SimulatedExecutor()
EXTERNAL = ExternalExecutor()


class UnknownExecutor(LookupError):
    """A name the registry does not hold."""


def executor_get(name: str | None = None) -> Executor:
    """The executor ``name`` (default: ``DEPLOY_EXECUTOR``)."""
    name = name or settings.DEPLOY_EXECUTOR
    try:
        path = EXECUTORS[name]
    except KeyError:
        raise UnknownExecutor(
            f"no executor {name!r} (known: {sorted(EXECUTORS)})"
        ) from None
    found = import_string(path)
    if isinstance(found, Executor):
        return found
    if callable(found):
        return FunctionExecutor(name, found)
    raise TypeError(f"{path} is not an executor")


def executor_names() -> list[str]:
    return list(EXECUTORS)


def executor_choices() -> list[tuple[str, str]]:
    """A deploy target's ``executor`` choices: the registry's names."""
    return [(name, name) for name in EXECUTORS]


def executor_settings_check() -> None:
    """Raises ``ImproperlyConfigured`` when ``DEPLOY_EXECUTOR`` names no executor, or one
    whose own settings are missing or invalid (``http`` without ``DEPLOY_HTTP_URL`` and a
    ``whsec_`` ``DEPLOY_HTTP_SECRET``, ``github`` without ``GITHUB_TOKEN``), or when a
    trigger URL of the environment is refused (``trigger_url_settings_check``)."""
    from django.core.exceptions import ImproperlyConfigured

    trigger_url_settings_check()
    try:
        executor = executor_get(settings.DEPLOY_EXECUTOR)
    except UnknownExecutor as exc:
        raise ImproperlyConfigured(f"DEPLOY_EXECUTOR: {exc}") from None
    errors = executor.config_errors(url="", secret="")
    if errors:
        problems = "; ".join(" ".join(messages) for messages in errors.values())
        raise ImproperlyConfigured(
            f"DEPLOY_EXECUTOR={executor.name} cannot run: {problems}"
        )


# The trigger URLs of the environment: the executors' own, and what a deploy target that
# names no URL falls back on, whatever DEPLOY_EXECUTOR is.
TRIGGER_URL_SETTINGS = ("DEPLOY_HTTP_URL", "GITHUB_API_URL")


def trigger_url_settings_check() -> None:
    """Raises ``ImproperlyConfigured`` when a trigger URL of the environment is not an
    http(s) URL (every job would fail with a detail that repeats it) or carries user
    information (docs/security.md, "Deploy targets"), with a message that does not repeat
    it."""
    from django.core.exceptions import ImproperlyConfigured

    for name in TRIGGER_URL_SETTINGS:
        url = getattr(settings, name) or ""
        problems = (url_scheme_errors(url) or url_credential_errors(url)) if url else []
        if problems:
            raise ImproperlyConfigured(f"{name}: {' '.join(problems)}")
