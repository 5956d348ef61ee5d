"""Deploy targets in the admin: operators create and change them (each save an operator
action, the secret write-only and shown as a fingerprint), send test triggers; auditors view
them and change nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.actors import Actor
from core.errors import InvalidPayload
from deployments.models import DeployTarget, DeployTargetTest, secret_fingerprint
from deployments.targets import deploy_target_save, deploy_target_test_run
from tests.console import admin_action
from tests.deployments.fake_github import FakeGitHub
from tests.deployments.leaks import STRAY
from tests.deployments.receiver import RECEIVER_SECRET
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

ADD = reverse("admin:deployments_deploytarget_add")
CHANGELIST = reverse("admin:deployments_deploytarget_changelist")


def form(**overrides) -> dict:
    data = {
        "name": "shop-prod",
        "executor": "http",
        "repository_pattern": "acme/*",
        "environment_pattern": "prod*",
        "applies_to": "",
        "priority": "100",
        "url": "https://ci.internal.example/hooks/deploy?token=jenkins-token",
        "secret": RECEIVER_SECRET,
        "is_enabled": "on",
    }
    data.update(overrides)
    return data


def change_url(target) -> str:
    return reverse("admin:deployments_deploytarget_change", args=[target.pk])


def test_an_operator_creates_a_target_whose_secret_is_never_shown(operator_client):
    response = operator_client.post(ADD, form())
    assert response.status_code == 302, response.content.decode()[:3000]
    target = DeployTarget.objects.get(name="shop-prod")
    assert target.secret == RECEIVER_SECRET
    assert target.executor == "http"

    action = OperatorAction.objects.get(action="create_deploy_target")
    assert action.actor_name == "operator"
    assert action.details["target"] == "shop-prod"
    assert action.details["before"] == {}
    assert action.details["after"]["secret"] == secret_fingerprint(RECEIVER_SECRET)
    assert RECEIVER_SECRET not in str(action.details)

    for url in (CHANGELIST, change_url(target)):
        page = operator_client.get(url).content.decode()
        assert RECEIVER_SECRET not in page
        assert secret_fingerprint(RECEIVER_SECRET) in page
    # The list shows the URL without its query (a Jenkins token, say).
    assert "jenkins-token" not in operator_client.get(CHANGELIST).content.decode()


def test_a_change_keeps_the_secret_unless_a_new_one_is_typed(operator_client):
    operator_client.post(ADD, form())
    target = DeployTarget.objects.get()

    response = operator_client.post(
        change_url(target), form(secret="", environment_pattern="production")
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    target.refresh_from_db()
    assert (target.environment_pattern, target.secret) == (
        "production",
        RECEIVER_SECRET,
    )
    change = OperatorAction.objects.get(action="change_deploy_target")
    assert change.details["before"]["environment_pattern"] == "prod*"
    assert change.details["after"]["environment_pattern"] == "production"

    # Saved unchanged: nothing recorded.
    operator_client.post(
        change_url(target), form(secret="", environment_pattern="production")
    )
    assert OperatorAction.objects.filter(action="change_deploy_target").count() == 1

    new_secret = "whsec_" + "A" * 43 + "="
    operator_client.post(
        change_url(target), form(secret=new_secret, environment_pattern="production")
    )
    target.refresh_from_db()
    assert target.secret == new_secret
    last = OperatorAction.objects.filter(action="change_deploy_target").latest("id")
    assert last.details["before"]["secret"] == secret_fingerprint(RECEIVER_SECRET)
    assert last.details["after"]["secret"] == secret_fingerprint(new_secret)


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"secret": ""}, "secret", "whsec_"),
        ({"secret": "not-a-whsec"}, "secret", "whsec_"),
        ({"url": ""}, "url", "URL is required"),
        ({"url": "http://169.254.169.254/latest/"}, "url", "denied network"),
        ({"url": "http://[::ffff:169.254.169.254]/latest/"}, "url", "denied network"),
        ({"executor": "github", "secret": "ghp_x"}, "applies_to", "deployments only"),
        ({"executor": "external"}, "url", "calls nothing"),
        ({"repository_pattern": " "}, "repository_pattern", ""),
    ],
)
def test_an_invalid_target_is_refused_with_its_reason(
    operator_client, settings, overrides, field, message
):
    settings.DEPLOY_HTTP_URL = ""
    settings.DEPLOY_HTTP_SECRET = ""
    response = operator_client.post(ADD, form(**overrides))
    assert response.status_code == 200  # the form again
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert message in " ".join(errors[field])
    assert not DeployTarget.objects.exists()
    assert not OperatorAction.objects.filter(action="create_deploy_target").exists()


def test_a_github_target_for_deployments_may_use_the_default_token(
    operator_client, settings
):
    settings.GITHUB_TOKEN = "ghp_default_token"
    response = operator_client.post(
        ADD,
        form(name="gh", executor="github", url="", secret="", applies_to="deployments"),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert DeployTarget.objects.get(name="gh").secret == ""


def test_targets_are_never_deleted_through_the_admin(operator_client):
    operator_client.post(ADD, form())
    target = DeployTarget.objects.get()
    url = reverse("admin:deployments_deploytarget_delete", args=[target.pk])
    assert operator_client.post(url, {"post": "yes"}).status_code == 403
    assert DeployTarget.objects.filter(pk=target.pk).exists()


def test_auditors_view_targets_and_change_nothing(auditor_client):
    target = DeployTarget(
        name="shop-prod",
        executor="http",
        url="https://ci.internal.example/hooks/deploy",
    )
    deploy_target_save(target=target, secret=RECEIVER_SECRET, actor=Actor.system())
    assert auditor_client.get(CHANGELIST).status_code == 200
    page = auditor_client.get(change_url(target))
    assert page.status_code == 200
    assert RECEIVER_SECRET not in page.content.decode()
    assert auditor_client.post(ADD, form(name="other")).status_code == 403
    assert (
        auditor_client.post(change_url(target), form(priority="1")).status_code == 403
    )
    admin_action(
        auditor_client, "deployments_deploytarget", "send_test_trigger", target
    )
    assert not OperatorAction.objects.filter(action="test_deploy_target").exists()


# A secret or token with a stray character is refused where it is set, and never shown
# (docs/security.md, "Secrets").
GITHUB_TOKEN = "ghp_admin_0123456789abcdefABCDEF"
STRAY_PROBLEMS = {
    "leading space": (" ", "has a leading space"),
    **{
        name: (char, "has a trailing space" if name == "space" else "control character")
        for name, char in STRAY.items()
    },
}


def stray_secret(executor: str, name: str) -> tuple[str, str]:
    """A clean secret for ``executor``, and the same with the stray character."""
    char, _ = STRAY_PROBLEMS[name]
    clean = GITHUB_TOKEN if executor == "github" else RECEIVER_SECRET
    return clean, (char + clean if name == "leading space" else clean + char)


def target_form(executor: str, secret: str, **overrides) -> dict:
    if executor == "github":
        overrides = {"url": "", "applies_to": "deployments", **overrides}
    return form(executor=executor, secret=secret, **overrides)


@pytest.mark.parametrize("name", STRAY_PROBLEMS)
@pytest.mark.parametrize("executor", ["github", "http"])
def test_a_secret_with_a_stray_character_is_refused_and_never_shown(
    operator_client, executor, name
):
    clean, stray = stray_secret(executor, name)
    response = operator_client.post(ADD, target_form(executor, stray))

    assert response.status_code == 200  # the form again
    errors = response.context["adminform"].form.errors
    said = " ".join(errors.get("secret", []))
    # Django's own field refuses a NUL first ("Null characters are not allowed.").
    expected = "Null characters" if name == "nul" else STRAY_PROBLEMS[name][1]
    assert expected in said, errors
    assert clean not in response.content.decode()
    assert not DeployTarget.objects.exists()
    assert not OperatorAction.objects.exists()


@pytest.mark.parametrize("name", STRAY_PROBLEMS)
def test_the_service_refuses_a_secret_with_a_stray_character(name):
    clean, stray = stray_secret("github", name)
    target = DeployTarget(name="gh", executor="github", applies_to="deployments")
    with pytest.raises(InvalidPayload) as refused:
        deploy_target_save(target=target, secret=stray, actor=Actor.system())
    [said] = refused.value.details["secret"]
    assert STRAY_PROBLEMS[name][1] in said
    assert clean not in str(refused.value) + said
    assert not DeployTarget.objects.exists()
    assert not OperatorAction.objects.exists()


def test_a_stored_secret_with_a_stray_character_must_be_typed_again(operator_client):
    """A target saved before the rule (its row written as it was): a change that keeps its
    secret is refused until a clean one is typed."""
    target = DeployTarget.objects.create(
        name="gh",
        executor="github",
        applies_to="deployments",
        secret=GITHUB_TOKEN + "\r",
    )
    response = operator_client.post(
        change_url(target), target_form("github", "", name="gh", priority="5")
    )
    assert response.status_code == 200
    said = " ".join(response.context["adminform"].form.errors["secret"])
    assert "secret contains a control character (U+000D)" in said
    assert "type it again" in said
    assert GITHUB_TOKEN not in response.content.decode()
    assert not OperatorAction.objects.exists()

    response = operator_client.post(
        change_url(target),
        target_form("github", GITHUB_TOKEN, name="gh", priority="5"),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    target.refresh_from_db()
    assert (target.secret, target.priority) == (GITHUB_TOKEN, 5)
    change = OperatorAction.objects.get(action="change_deploy_target")
    assert GITHUB_TOKEN not in str(change.details)


@pytest.mark.parametrize("name", [n for n in STRAY if n != "nul"])
def test_a_test_trigger_with_a_stored_stray_token_shows_no_token(operator_client, name):
    """PostgreSQL holds no NUL: the other stray characters, in rows saved before the rule.
    The admin queues the test; the worker's part runs here, as a worker runs it."""
    with FakeGitHub(token=GITHUB_TOKEN) as github:
        target = DeployTarget.objects.create(
            name="gh",
            executor="github",
            applies_to="deployments",
            url=github.url,
            secret=GITHUB_TOKEN + STRAY[name],
        )
        response = admin_action(
            operator_client,
            "deployments_deploytarget",
            "send_test_trigger",
            target,
            follow=True,
        )
        assert response.status_code == 200
        test = DeployTargetTest.objects.get()
        assert deploy_target_test_run(test_id=test.pk, worker="w1") == "not_reached"
    page = operator_client.get(
        reverse("admin:deployments_deploytarget_changelist")
    ).content.decode()
    assert "not reached (no HTTP answer)" in page
    assert GITHUB_TOKEN not in page
    assert GITHUB_TOKEN not in response.content.decode()
    kept = " ".join(
        str(value)
        for value in DeployTargetTest.objects.filter(pk=test.pk).values().get().values()
    )
    assert GITHUB_TOKEN not in kept
    action = OperatorAction.objects.get(action="test_deploy_target")
    assert GITHUB_TOKEN not in str(action.details)


# --- a target's breaker and its limit ------------------------------------------------------


def test_an_operator_opens_and_closes_a_breaker_and_sets_a_limit(operator_client):
    response = operator_client.post(ADD, form(max_in_flight="2"))
    assert response.status_code == 302, response.content.decode()[:3000]
    target = DeployTarget.objects.get(name="shop-prod")
    assert target.max_in_flight == 2
    created = OperatorAction.objects.get(action="create_deploy_target")
    assert created.details["after"]["max_in_flight"] == 2

    admin_action(operator_client, "deployments_deploytarget", "open_breaker", target)
    target.refresh_from_db()
    assert target.breaker_state == "open"
    page = operator_client.get(CHANGELIST).content.decode()
    assert "Open, since" in page
    admin_action(operator_client, "deployments_deploytarget", "close_breaker", target)
    target.refresh_from_db()
    assert target.breaker_state == "closed"
    recorded = [
        (a.details["previous"], a.details["state"], a.details["cause"], a.actor_name)
        for a in OperatorAction.objects.filter(
            action="set_deploy_target_breaker"
        ).order_by("id")
    ]
    assert recorded == [
        ("closed", "open", "operator", "operator"),
        ("open", "closed", "operator", "operator"),
    ]


def test_auditors_cannot_move_a_breaker(auditor_client):
    target = DeployTarget(name="shop-prod", executor="external")
    deploy_target_save(target=target, secret=None, actor=Actor.system())
    admin_action(auditor_client, "deployments_deploytarget", "open_breaker", target)
    target.refresh_from_db()
    assert target.breaker_state == "closed"
    assert not OperatorAction.objects.filter(
        action="set_deploy_target_breaker"
    ).exists()
