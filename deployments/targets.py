"""Deploy targets (docs/http-api.md, "Executors"): where operators route jobs, by repository
and environment, to an executor with its URL and secret. Creating and changing one is an
operator action (``webhooks.operator_actions``), recorded with the change in one transaction;
a target's secret is recorded only as its fingerprint. Sending a test message records the
action first, commits, then calls (never a call inside a transaction)."""

from __future__ import annotations

import json
import logging
import secrets as random_secrets

from django.db import transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from core.actors import Actor
from core.errors import InvalidPayload
from core.secrets import secret_problem
from webhooks.models import OperatorAction
from webhooks.operator_actions import (
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
from .models import DeployTarget, TriggerAttempt
from .services import url_shown
from .triggers import post_signed, result_of

logger = logging.getLogger(__name__)

TEST_MESSAGE_TYPE = "deploy_target.test"


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
        if target.url:
            try:
                outbound.destination_check(target.url)
            except outbound.DeniedDestination as exc:
                errors.setdefault("url", []).append(str(exc))
    elif target.url or secret:
        errors["url"] = [
            f"The {executor.name} executor calls nothing: no URL or secret."
        ]
    problem = secret_problem(secret)
    if problem:
        # The cause of whatever else the executor found wrong with it; never quoted.
        errors["secret"] = [f"The secret {problem}: type it again without it."]
    return errors


@sensitive_variables()
@transaction.atomic
def deploy_target_save(
    *, target: DeployTarget, secret: str | None, actor: Actor, reason: str = ""
) -> bool:
    """Creates ``target`` (no primary key yet) or saves the changes made to it, with a new
    ``secret`` (``None`` or ``""``: the one it has), as one operator action that records
    its settings before and after (the secret as its fingerprint). Validated with
    ``deploy_target_errors`` (``InvalidPayload`` with the field errors). Returns whether
    anything changed (an unchanged target records nothing). An existing target is changed
    under its row lock: two changes at once each record what they found."""
    creating = target.pk is None
    before: dict = {}
    if not creating:
        current = DeployTarget.objects.select_for_update().get(pk=target.pk)
        before = current.settings_snapshot()
        if not secret:
            target.secret = current.secret
    if secret:
        target.secret = secret
    errors = deploy_target_errors(target=target, secret=target.secret)
    if errors:
        raise InvalidPayload(details=errors)
    after = target.settings_snapshot()
    if not creating and after == before:
        return False
    target.updated_at = timezone.now()
    target.save()
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


@sensitive_variables()
def deploy_target_test(*, target: DeployTarget, actor: Actor) -> TriggerResult | None:
    """Sends a test to ``target``: an ``http`` target gets a signed test message under a
    fresh id (``tst_...``), a ``github`` target's token is checked with
    ``GET /rate_limit``. Recorded as an operator action, committed before anything leaves.
    Returns the classified outcome, ``None`` for an executor that calls nothing."""
    executor = executor_get(target.executor)
    if not isinstance(executor, TriggerExecutor):
        return None
    url = target.url or executor.default_url()
    secret = target.secret or executor.default_secret()
    with transaction.atomic():
        operator_action_record(
            action=OperatorAction.Action.TEST_DEPLOY_TARGET,
            actor=actor,
            reason="send test trigger",
            details=TestDeployTargetDetails(
                target=target.name,
                target_id=target.pk,
                executor=executor.name,
                url=url_shown(url),
            ),
        )
    if executor.name == "github":
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
    message_id = f"tst_{random_secrets.token_hex(12)}"
    return post_signed(
        url=url,
        secret=secret,
        message_id=message_id,
        body=test_message(target=target, message_id=message_id),
    )


def deploy_target_test_summary(result: TriggerResult | None) -> tuple[bool, str]:
    """Whether a test went through, and one line saying what came back."""
    if result is None:
        return True, "nothing to send: this executor calls nothing"
    ok = result.outcome == TriggerAttempt.Outcome.DELIVERED
    return ok, f"{result.outcome}: {result.describe()}"
