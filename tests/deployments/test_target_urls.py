"""Credentials in trigger URLs (docs/security.md, "Deploy targets"): a URL with user
information is refused, in the admin, by the service and in the environment at start; a
query (a Jenkins trigger's ``?token=``) is sent with every call and kept out of every record:
operator actions (their settings snapshot holds the URL without it and its fingerprint),
attempts, job details, log leaves, bundles and the admin's pages."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from audit.checkpoints import checkpoint_make
from audit.models import LogLeaf
from audit.stories import evidence_bundle
from core.actors import Actor
from core.errors import InvalidPayload
from deployments.executors import executor_settings_check
from deployments.models import Deployment, DeployTarget, TriggerAttempt
from deployments.services.attempts import job_run
from deployments.targets import deploy_target_save
from deployments.trigger_urls import url_query_fingerprint, url_shown
from tests.audit.ledger_rows import seal_all
from tests.deployments.factories import deployment_body, idempotent_post
from tests.deployments.receiver import RECEIVER_SECRET, Receiver
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

ADD = reverse("admin:deployments_deploytarget_add")
CHANGELIST = reverse("admin:deployments_deploytarget_changelist")
TOKEN = "jenkins-trigger-token-0123456789"
PASSWORD = "pa55-in-the-url"


def change_url(target) -> str:
    return reverse("admin:deployments_deploytarget_change", args=[target.pk])


def form(**overrides) -> dict:
    data = {
        "name": "jenkins",
        "executor": "http",
        "repository_pattern": "acme/*",
        "environment_pattern": "*",
        "applies_to": "",
        "priority": "100",
        "url": f"https://ci.internal.example/generic-webhook-trigger/invoke?token={TOKEN}",
        "secret": RECEIVER_SECRET,
        "is_enabled": "on",
    }
    data.update(overrides)
    return data


def query_fingerprint(query: str) -> str:
    return "sha256:" + hashlib.sha256(query.encode()).hexdigest()[:12]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"https://deployer:{PASSWORD}@ci.internal.example/hook", "user information"),
        (f"https://{PASSWORD}@ci.internal.example/hook", "user information"),
        # Django's own URL check refuses an empty user name before ours says why.
        (f"https://:{PASSWORD}@ci.internal.example/hook", "Enter a valid URL"),
    ],
)
def test_a_target_url_with_user_information_is_refused(operator_client, url, message):
    response = operator_client.post(ADD, form(url=url))
    assert response.status_code == 200  # the form again
    errors = " ".join(response.context["adminform"].form.errors["url"])
    assert message in errors
    assert PASSWORD not in errors
    assert not DeployTarget.objects.exists()
    assert not OperatorAction.objects.exists()

    with pytest.raises(InvalidPayload) as refused:
        deploy_target_save(
            target=DeployTarget(name="direct", executor="http", url=url),
            secret=RECEIVER_SECRET,
            actor=Actor.system(),
        )
    assert "user information" in " ".join(refused.value.details["url"])
    assert PASSWORD not in str(refused.value.details)
    assert not DeployTarget.objects.exists()


@pytest.mark.parametrize("name", ["DEPLOY_HTTP_URL", "GITHUB_API_URL"])
def test_a_trigger_url_with_user_information_in_the_environment_refuses_the_start(
    settings, name
):
    settings.DEPLOY_EXECUTOR = "simulated"  # used by targets that name no URL, too
    setattr(settings, name, f"https://deployer:{PASSWORD}@ci.internal.example/hook")
    with pytest.raises(ImproperlyConfigured, match=name) as refused:
        executor_settings_check()
    assert "user information" in str(refused.value)
    assert PASSWORD not in str(refused.value)


@pytest.mark.parametrize(
    "url",
    [
        f"ftp://ci.internal.example/hook?token={TOKEN}",
        f"ci.internal.example?token={TOKEN}",
    ],
)
def test_a_trigger_url_of_the_environment_must_be_http(settings, url):
    """Else every job fails with a detail that repeats the URL, query and all."""
    settings.DEPLOY_EXECUTOR = "simulated"
    settings.DEPLOY_HTTP_URL = url
    with pytest.raises(ImproperlyConfigured, match="DEPLOY_HTTP_URL") as refused:
        executor_settings_check()
    assert "http(s)" in str(refused.value)
    assert TOKEN not in str(refused.value)


def test_the_change_form_keeps_a_query_it_never_shows(operator_client, auditor):
    from django.test import Client

    operator_client.post(ADD, form())
    target = DeployTarget.objects.get()
    stored = target.url
    assert stored.endswith(f"?token={TOKEN}")
    created = OperatorAction.objects.get(action="create_deploy_target")
    assert created.details["after"]["url"] == (
        "https://ci.internal.example/generic-webhook-trigger/invoke"
    )
    assert created.details["after"]["url_query"] == query_fingerprint(f"token={TOKEN}")

    auditor_client = Client()
    auditor_client.force_login(auditor)
    for http in (operator_client, auditor_client):
        for page in (CHANGELIST, change_url(target)):
            text = http.get(page).content.decode()
            assert TOKEN not in text
            assert query_fingerprint(f"token={TOKEN}") in text

    # Saved with the URL as the form shows it (no query): the query stays.
    shown = "https://ci.internal.example/generic-webhook-trigger/invoke"
    response = operator_client.post(change_url(target), form(url=shown, secret=""))
    assert response.status_code == 302, response.content.decode()[:3000]
    target.refresh_from_db()
    assert target.url == stored
    assert not OperatorAction.objects.filter(action="change_deploy_target").exists()

    # A new query replaces it: recorded as its fingerprint.
    operator_client.post(
        change_url(target), form(url=f"{shown}?token=another-one", secret="")
    )
    target.refresh_from_db()
    assert target.url == f"{shown}?token=another-one"
    change = OperatorAction.objects.get(action="change_deploy_target")
    assert change.details["before"]["url_query"] == query_fingerprint(f"token={TOKEN}")
    assert change.details["after"]["url_query"] == query_fingerprint(
        "token=another-one"
    )

    # Another address never inherits the query (a token meant for one receiver).
    operator_client.post(
        change_url(target),
        form(url="https://other.internal.example/invoke", secret=""),
    )
    target.refresh_from_db()
    assert target.url == "https://other.internal.example/invoke"

    # The query of an unchanged address is dropped only when asked.
    operator_client.post(
        change_url(target),
        form(url="https://other.internal.example/invoke?token=x", secret=""),
    )
    operator_client.post(
        change_url(target),
        form(
            url="https://other.internal.example/invoke", secret="", url_query_clear="on"
        ),
    )
    target.refresh_from_db()
    assert target.url == "https://other.internal.example/invoke"
    last = OperatorAction.objects.filter(action="change_deploy_target").latest("id")
    assert last.details["after"]["url_query"] == ""
    assert TOKEN not in json.dumps(
        list(OperatorAction.objects.values_list("details", flat=True))
    )


@pytest.mark.django_db(transaction=True)
def test_a_url_query_is_sent_with_the_call_and_recorded_nowhere(
    api, operator_client, auditor_client, settings
):
    settings.DEPLOY_EXECUTOR = "simulated"
    with Receiver() as receiver:
        response = operator_client.post(ADD, form(url=f"{receiver.url}?token={TOKEN}"))
        assert response.status_code == 302, response.content.decode()[:3000]
        target = DeployTarget.objects.get()
        operator_client.post(
            change_url(target),
            form(url=receiver.url, secret="", priority="10"),  # the query kept
        )
        created = idempotent_post(
            api, "/api/deployments/", deployment_body(repository="acme/shop"), "k1"
        )
        job = Deployment.objects.get(public_id=created.json()["deployment_id"])
        assert job_run(kind="deployment", public_id=job.public_id, worker="w1") == (
            "triggered"
        )
    [seen] = receiver.received
    assert seen.verified, seen.error
    assert seen.path == f"/hooks/deploy?token={TOKEN}"

    seal_all()
    checkpoint_make()
    job.refresh_from_db()
    records = {
        "job detail": job.detail,
        "attempts": json.dumps(list(TriggerAttempt.objects.values()), default=str),
        "operator actions": json.dumps(
            list(OperatorAction.objects.values("details", "reason")), default=str
        ),
        "log leaves": "\n".join(LogLeaf.objects.values_list("leaf", flat=True)),
        "bundle": json.dumps(evidence_bundle(subject="deployment", pk=job.pk)),
    }
    for http in (operator_client, auditor_client):
        for page in (
            CHANGELIST,
            change_url(target),
            reverse("admin:deployments_deployment_change", args=[job.pk]),
            reverse("admin:trail_operatoraction_changelist"),
            *(
                reverse("admin:trail_operatoraction_change", args=[pk])
                for pk in OperatorAction.objects.values_list("pk", flat=True)
            ),
        ):
            answer = http.get(page)
            assert answer.status_code == 200, page
            records[page] = answer.content.decode()
    assert TriggerAttempt.objects.get().url == receiver.url
    assert LogLeaf.objects.filter(kind="operator_action").count() >= 2
    leaked = [where for where, text in records.items() if TOKEN in text]
    assert leaked == []


def test_a_url_is_shown_without_credentials_and_its_query_as_a_fingerprint():
    assert url_shown("http://[::1]:8080/hooks/deploy?token=x") == (
        "http://[::1]:8080/hooks/deploy"
    )
    assert url_query_fingerprint("https://ci.example/hook") == ""
    assert url_query_fingerprint(f"https://ci.example/hook?token={TOKEN}") == (
        query_fingerprint(f"token={TOKEN}")
    )
