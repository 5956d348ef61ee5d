"""Deploy targets (docs/http-api.md, "Executors"): where operators route jobs, by repository
and environment, to an executor with its URL and secret. Creating and changing one is an
operator action (``trail.services``), recorded with the change in one transaction;
a target's secret is recorded only as its fingerprint. "Send test trigger" records the
action and the test, commits, and a worker calls (never the web process, never a call inside
a transaction); the admin shows the test's coarse outcome when it comes."""

from __future__ import annotations

import json
import logging
import secrets as random_secrets
from collections.abc import Sequence
from enum import StrEnum

from celery import current_app
from django.db import transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from core.actors import Actor
from core.errors import InvalidPayload
from core.models import ApiClient
from core.secrets import secret_problem
from trail.models import OperatorAction
from trail.services import (
    DeployTargetDetails,
    TestDeployTargetDetails,
    operator_action_record,
)

from . import outbound
from .executors import (
    ExecutorMode,
    TriggerExecutor,
    TriggerResult,
    UnknownExecutor,
    executor_get,
)
from .github import GitHubApiExecutor
from .models import (
    TEST_EXPIRES_SECONDS,
    DeployTarget,
    DeployTargetTest,
    TriggerAttempt,
)
from .trigger_urls import url_credential_errors, url_shown
from .triggers import post_signed, result_of

logger = logging.getLogger(__name__)

TEST_MESSAGE_TYPE = "deploy_target.test"
# Published by name (``deploy_target_test_publish``), run by ``tasks.deploy_target_test_task``.
TEST_TASK = "deployments.deploy_target_test"


class NotSent(StrEnum):
    """Why a delivery of a test's message sent nothing (``deploy_target_test_run``)."""

    MISSING = "missing"  # no such test (any more)
    ALREADY_SENT = "already_sent"  # another delivery claimed it
    EXPIRED = "expired"  # no worker took it within TEST_EXPIRES_SECONDS


def deploy_target_url_errors(url: str) -> list[str]:
    """What is wrong with a trigger target's ``url``: user information (refused, and checked
    no further: a message about the destination would repeat the URL), or a destination in
    a denied network (``outbound.destination_check``)."""
    problems = url_credential_errors(url)
    if problems:
        return problems
    try:
        outbound.destination_check(url)
    except outbound.DeniedDestination as exc:
        return [str(exc)]
    return []


@sensitive_variables()
def deploy_target_errors(*, target: DeployTarget, secret: str) -> dict[str, list[str]]:
    """What is wrong with ``target`` as it would be saved with ``secret`` (the effective
    one: a new secret, or the one it keeps), field by field; empty when it is valid."""
    errors: dict[str, list[str]] = {}
    try:
        executor = executor_get(target.executor)
    except UnknownExecutor as exc:
        return {"executor": [str(exc)]}
    for name in ("repository_pattern", "environment_pattern"):
        if not getattr(target, name).strip():
            errors[name] = ["A glob: * matches everything."]
    if executor.kinds == frozenset({"deployment"}) and (
        target.applies_to != DeployTarget.AppliesTo.DEPLOYMENTS
    ):
        errors["applies_to"] = [
            f"The {executor.name} executor carries deployments only."
        ]
    if executor.mode == ExecutorMode.TRIGGER:
        errors.update(executor.config_errors(url=target.url, secret=secret))
        url_problems = deploy_target_url_errors(target.url) if target.url else []
        if url_problems:
            errors.setdefault("url", []).extend(url_problems)
    elif target.url or secret:
        errors["url"] = [
            f"The {executor.name} executor calls nothing: no URL or secret."
        ]
    problem = secret_problem(secret)
    if problem:
        # The cause of whatever else the executor found wrong with it; never quoted.
        errors["secret"] = [f"The secret {problem}: type it again without it."]
    return errors


# A target's columns an operator sets (the API clients apart: a relation).
SETTING_COLUMNS = (
    "name",
    "repository_pattern",
    "environment_pattern",
    "applies_to",
    "priority",
    "executor",
    "url",
    "secret",
    "is_enabled",
    "max_in_flight",
)


@sensitive_variables()
@transaction.atomic
def deploy_target_save(
    *,
    target: DeployTarget,
    secret: str | None,
    actor: Actor,
    reason: str = "",
    clients: Sequence[ApiClient] | None = None,
) -> bool:
    """Creates ``target`` (no primary key yet) or saves the changes made to it, with a new
    ``secret`` (``None`` or ``""``: the one it has) and the API clients it serves
    (``clients``; ``None``: those it serves, none for a new target: every client), as one
    operator action that records its settings before and after (the secret as its
    fingerprint, the clients by id and name). Validated with ``deploy_target_errors``
    (``InvalidPayload`` with the field errors). Returns whether anything changed (an
    unchanged target records nothing). An existing target is changed under its row lock:
    two changes at once each record what they found."""
    creating = target.pk is None
    before: dict = {}
    if not creating:
        current = DeployTarget.objects.select_for_update().get(pk=target.pk)
        before = current.settings_snapshot()
        if not secret:
            target.secret = current.secret
        if clients is None:
            clients = list(current.clients.all())
    if secret:
        target.secret = secret
    clients = list(clients or [])
    errors = deploy_target_errors(target=target, secret=target.secret)
    if errors:
        raise InvalidPayload(details=errors)
    after = target.settings_snapshot(clients=clients)
    if not creating and after == before:
        return False
    target.updated_at = timezone.now()
    if creating:
        target.save()
    else:
        # Its settings only: its breaker is the attempts' and the breaker actions' to move
        # (``services.breakers``), and may have moved since the form was read.
        target.save(update_fields=[*SETTING_COLUMNS, "updated_at"])
    target.clients.set(clients)
    operator_action_record(
        action=(
            OperatorAction.Action.CREATE_DEPLOY_TARGET
            if creating
            else OperatorAction.Action.CHANGE_DEPLOY_TARGET
        ),
        actor=actor,
        reason=reason,
        details=DeployTargetDetails(
            target=target.name, target_id=target.pk, before=before, after=after
        ),
    )
    logger.info(
        "deploy_target.created" if creating else "deploy_target.changed",
        extra={"target": target.name, "executor": target.executor},
    )
    return True


def test_message(*, target: DeployTarget, message_id: str) -> bytes:
    """The body of a test message: a type no job has, so that a receiver acting only on
    ``deployment.requested`` and ``build.requested`` ignores it."""
    return json.dumps(
        {
            "type": TEST_MESSAGE_TYPE,
            "timestamp": timezone.now().isoformat().replace("+00:00", "Z"),
            "data": {"target": target.name, "message_id": message_id},
        },
        separators=(",", ":"),
    ).encode()


def deploy_target_test_request(
    *, target: DeployTarget, actor: Actor
) -> DeployTargetTest | None:
    """Asks a worker to send a test to ``target`` (``deploy_target_test_run``): the test's
    row and the operator action are committed together, then the task is published (never
    a call from the web process: the workers' egress rules apply to tests as to jobs).
    ``None`` for an executor that calls nothing: nothing is recorded."""
    executor = executor_get(target.executor)
    if not isinstance(executor, TriggerExecutor):
        return None
    with transaction.atomic():
        test = DeployTargetTest.objects.create(
            target=target,
            message_id=f"tst_{random_secrets.token_hex(12)}",
            requested_by_name=actor.name[:255],
        )
        operator_action_record(
            action=OperatorAction.Action.TEST_DEPLOY_TARGET,
            actor=actor,
            reason="send test trigger",
            details=TestDeployTargetDetails(
                target=target.name,
                target_id=target.pk,
                test_id=test.pk,
                executor=executor.name,
                url=url_shown(target.url or executor.default_url()),
            ),
        )
        transaction.on_commit(lambda: deploy_target_test_publish(test_id=test.pk))
    logger.info(
        "deploy_target.test_requested",
        extra={"target": target.name, "test_id": test.pk, "actor": actor.name},
    )
    return test


def deploy_target_test_publish(*, test_id: int) -> bool:
    """Publishes the task of a test; ``False`` if the broker refused it, and the test then
    says it was not sent (never raises: the operator sends another)."""
    try:
        current_app.send_task(TEST_TASK, args=[test_id])
    except Exception as exc:  # the broker is down
        logger.warning(
            "deploy_target.test_publish_failed",
            extra={"test_id": test_id, "error": type(exc).__name__},
        )
        DeployTargetTest.objects.filter(
            pk=test_id, state=DeployTargetTest.State.QUEUED
        ).update(
            state=DeployTargetTest.State.NOT_SENT,
            reason="the broker was unreachable",
            finished_at=timezone.now(),
        )
        return False
    return True


def deploy_target_test_run(
    *, test_id: int, worker: str
) -> NotSent | DeployTargetTest.Outcome:
    """Sends a test once, however often its message is delivered, to its target as the
    target is now: an ``http`` target gets a signed test message under the test's id
    (``tst_...``), a ``github`` or ``github-actions`` target's token is checked with
    ``GET /rate_limit``. The test is claimed (``sending``) in a committed transaction
    before the call and its coarse outcome recorded after (``test_outcome_of``). A test older than
    ``TEST_EXPIRES_SECONDS`` is not sent. Returns what happened."""
    now = timezone.now()
    with transaction.atomic():
        test = (
            DeployTargetTest.objects.select_for_update()
            .select_related("target")
            .filter(pk=test_id)
            .first()
        )
        if test is None:
            return NotSent.MISSING
        if test.state != DeployTargetTest.State.QUEUED:
            return NotSent.ALREADY_SENT
        if test.expired(now=now):
            test.state = DeployTargetTest.State.NOT_SENT
            test.reason = f"no worker took it within {TEST_EXPIRES_SECONDS} s"
            test.finished_at = now
            test.save(update_fields=["state", "reason", "finished_at"])
            return NotSent.EXPIRED
        test.state = DeployTargetTest.State.SENDING
        test.started_at = now
        test.save(update_fields=["state", "started_at"])
    executor = executor_get(test.target.executor)
    result = (
        _test_send(target=test.target, executor=executor, message_id=test.message_id)
        if isinstance(executor, TriggerExecutor)
        else None
    )
    outcome, status_class = test_outcome_of(result)
    DeployTargetTest.objects.filter(pk=test.pk).update(
        state=DeployTargetTest.State.DONE,
        outcome=outcome,
        status_class=status_class,
        finished_at=timezone.now(),
    )
    # The worker's log has the class of error, for whoever runs the workers; the admin
    # shows the coarse outcome only.
    logger.info(
        "deploy_target.tested",
        extra={
            "target": test.target.name,
            "test_id": test.pk,
            "worker": worker,
            "outcome": outcome,
            "status_code": result.status_code if result else None,
            "error_class": result.error_class if result else "",
        },
    )
    return outcome


def test_outcome_of(
    result: TriggerResult | None,
) -> tuple[DeployTargetTest.Outcome, str]:
    """The coarse outcome of a test's classified result (``outbound.outcome_classify``),
    and the class of a status that is not a 2xx: whether an HTTP answer came, and its
    class, nothing else. Refused, timed out, unresolvable, denied and dropped are all
    ``not_reached``, so that a test cannot map which internal ports answer."""
    Outcome = DeployTargetTest.Outcome
    if result is None:
        return Outcome.NOTHING, ""
    if result.status_code is None:
        return Outcome.NOT_REACHED, ""
    if result.outcome == TriggerAttempt.Outcome.DELIVERED:
        return Outcome.DELIVERED, ""
    return Outcome.ANSWERED, f"{result.status_code // 100}xx"


@sensitive_variables()
def _test_send(
    *, target: DeployTarget, executor: TriggerExecutor, message_id: str
) -> TriggerResult:
    url = target.url or executor.default_url()
    secret = target.secret or executor.default_secret()
    if isinstance(executor, GitHubApiExecutor):
        endpoint = f"{url.rstrip('/')}/rate_limit"
        try:
            answer = outbound.call(
                outbound.http_client(),
                "GET",
                endpoint,
                headers={
                    "Authorization": f"Bearer {secret}",
                    "Accept": "application/vnd.github+json",
                },
            )
        except Exception as exc:  # classified: every failure of the call is an outcome
            return result_of(url=endpoint, error=exc, secrets=[secret])
        return result_of(url=endpoint, answer=answer, secrets=[secret])
    return post_signed(
        url=url,
        secret=secret,
        message_id=message_id,
        body=test_message(target=target, message_id=message_id),
    )
