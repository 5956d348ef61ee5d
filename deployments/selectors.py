"""Reads."""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from django.db.models import Exists, OuterRef, QuerySet, Subquery

from core.models import ApiClient
from idempotency.keys import idempotency_key_is_well_formed

from .models import BreakerState, DeployTarget, DeployTargetTest, Job


def job_get(*, model: type[Job], client: ApiClient, public_id: str) -> Job | None:
    """The client's own deployment or build; another client's is as good as absent."""
    return model.objects.filter(client=client, public_id=public_id).first()


def job_list_by_key(
    *, model: type[Job], client: ApiClient, idempotency_key: str | None
) -> QuerySet:
    """The client's jobs; with a key, only the latest operation made with it (a key reused
    after its TTL expired leads to the newer operation)."""
    jobs = model.objects.filter(client=client)
    if idempotency_key is None:
        return jobs
    if not idempotency_key_is_well_formed(idempotency_key):
        return jobs.none()  # no operation can have such a key
    latest = (
        model.objects.filter(client=OuterRef("client"), idempotency_key=idempotency_key)
        .order_by("-pk")
        .values("pk")[:1]
    )
    return jobs.filter(idempotency_key=idempotency_key, pk=Subquery(latest))


def _serving(targets: QuerySet[DeployTarget], *, client_id: int) -> QuerySet:
    """Of ``targets``, those that serve the client's jobs: those that name it, and those
    that name no client (docs/security.md, "Deploy targets and API clients")."""
    named = DeployTarget.clients.through.objects.filter(deploytarget_id=OuterRef("pk"))
    return targets.filter(~Exists(named) | Exists(named.filter(apiclient_id=client_id)))


def deploy_target_serves(*, target_id: int, client_id: int) -> bool:
    """Whether the target serves the client's jobs as it is now (a job routed to it
    earlier is not sent there again once it does not)."""
    return _serving(
        DeployTarget.objects.filter(pk=target_id), client_id=client_id
    ).exists()


def deploy_target_for(
    *, kind: str, client_id: int, repository: str, environment: str = ""
) -> DeployTarget | None:
    """The deploy target of a job: of the enabled targets that serve the job's client (those
    that name it, and those that name no client), the first (lowest ``priority``, then
    oldest) whose repository glob matches the job's repository (lower-cased) and whose
    environment glob matches its environment (a build has none: only ``*`` routes builds).
    A target that names other clients is not the job's, whatever it matches: the job goes
    on past it (docs/security.md, "Deploy targets and API clients"). ``None``: the job goes
    to ``DEPLOY_EXECUTOR``. Targets are few; one read of the enabled ones."""
    skip = (
        DeployTarget.AppliesTo.BUILDS
        if kind == "deployment"
        else DeployTarget.AppliesTo.DEPLOYMENTS
    )
    repository = repository.lower()
    targets = (
        _serving(DeployTarget.objects.filter(is_enabled=True), client_id=client_id)
        .exclude(applies_to=skip)
        .order_by("priority", "id")
    )
    for target in targets:
        if not fnmatchcase(repository, target.repository_pattern.lower()):
            continue
        if kind == "deployment":
            if fnmatchcase(environment, target.environment_pattern):
                return target
        elif target.environment_pattern == "*":
            return target
    return None


def deploy_target_last_tests(
    *, target_ids: Iterable[int]
) -> dict[int, DeployTargetTest]:
    """The latest "Send test trigger" of each of the targets that had one, by target id, in
    one read."""
    latest = (
        DeployTargetTest.objects.filter(target_id=OuterRef("target_id"))
        .order_by("-id")
        .values("pk")[:1]
    )
    tests = DeployTargetTest.objects.filter(
        target_id__in=list(target_ids), pk=Subquery(latest)
    )
    return {test.target_id: test for test in tests}


def deploy_target_breakers() -> list[tuple[str, bool, int]]:
    """Per enabled deploy target, by name: whether its breaker holds its triggers (open or
    half-open), and its attempts failed in a row. One statement: what ``/metrics`` reads at
    each scrape."""
    return [
        (name, state != BreakerState.CLOSED, failures)
        for name, state, failures in DeployTarget.objects.filter(is_enabled=True)
        .order_by("name")
        .values_list("name", "breaker_state", "breaker_failures")
    ]
