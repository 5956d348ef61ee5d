""" "Send test trigger" runs on a worker (docs/security.md, "Deploy targets"): the admin
records the request (an operator action, and the test's own row) and a worker sends it, so
that the workers' egress rules cover it; the list shows the outcome once it comes, reloading
itself meanwhile. The outcome is coarse: delivered, the receiver's answer by its class, or
not reached, never which of refused, timed out, unresolvable or denied, nor an address."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.actors import Actor
from deployments.models import DeployTarget, DeployTargetTest
from deployments.targets import (
    TEST_EXPIRES_SECONDS,
    deploy_target_save,
    deploy_target_test_request,
    deploy_target_test_run,
)
from tests.console import admin_action
from tests.deployments.receiver import RECEIVER_SECRET, Receiver, closed_port_url
from tests.deployments.test_trigger_workers import FAST
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:deployments_deploytarget_changelist")
REFRESH = '<meta http-equiv="refresh"'
NOT_REACHED = "not reached (no HTTP answer)"
OTHER_SECRET = "whsec_" + "B" * 43 + "="


def target(url: str, *, secret: str = RECEIVER_SECRET) -> DeployTarget:
    made = DeployTarget(name="shop-prod", executor="http", url=url)
    deploy_target_save(target=made, secret=secret, actor=Actor.system())
    return made


def test_the_admin_queues_a_test_and_a_worker_sends_it(operator_client):
    with Receiver() as receiver:
        made = target(receiver.url)
        response = admin_action(
            operator_client,
            "deployments_deploytarget",
            "send_test_trigger",
            made,
            follow=True,
        )
        assert response.status_code == 200
        # Nothing left from the web process.
        assert receiver.received == []
        [message] = [str(m) for m in response.context["messages"]]
        assert message.startswith("shop-prod: test trigger queued")
        test = DeployTargetTest.objects.get()
        assert (test.target, test.state) == (made, "queued")
        action = OperatorAction.objects.get(action="test_deploy_target")
        assert action.details == {
            "target": "shop-prod",
            "target_id": made.pk,
            "test_id": test.pk,
            "executor": "http",
            "url": receiver.url,
        }
        page = operator_client.get(CHANGELIST).content.decode()
        assert "waiting for a worker" in page
        assert REFRESH in page  # the list reloads itself until the outcome comes

        assert deploy_target_test_run(test_id=test.pk, worker="w1") == "delivered"
        assert deploy_target_test_run(test_id=test.pk, worker="w1") == "already_sent"
    [seen] = receiver.received
    assert seen.verified, seen.error
    assert seen.webhook_id == test.message_id
    assert seen.webhook_id.startswith("tst_")
    assert seen.message["type"] == "deploy_target.test"
    assert seen.message["data"] == {
        "target": "shop-prod",
        "message_id": test.message_id,
    }
    page = operator_client.get(CHANGELIST).content.decode()
    assert "delivered (HTTP 2xx)" in page
    assert REFRESH not in page
    change = reverse("admin:deployments_deploytarget_change", args=[made.pk])
    assert "delivered (HTTP 2xx)" in operator_client.get(change).content.decode()


def silent_listener() -> tuple[socket.socket, str]:
    """A port that takes connections and never answers: the call times out."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}/hooks/deploy"


@pytest.mark.parametrize(
    "case",
    [
        "refused",
        # Waits out the second of the timeout (pyproject.toml, the slow mark).
        pytest.param("timed out", marks=pytest.mark.slow),
        "denied",
        "unresolvable",
        "4xx",
        "5xx",
        "wrong secret",
    ],
)
def test_the_outcome_is_coarse_and_never_a_port_scan_oracle(settings, case):
    settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 1
    expected = {
        "4xx": "the receiver answered HTTP 4xx",
        "wrong secret": "the receiver answered HTTP 4xx",
        "5xx": "the receiver answered HTTP 5xx",
    }.get(case, NOT_REACHED)
    answer = {"4xx": 404, "5xx": 503}.get(case, 202)
    silent, silent_url = silent_listener()
    with silent, Receiver(answer=answer) as receiver:
        url = {
            "refused": closed_port_url(),
            "timed out": silent_url,
            "unresolvable": "http://deploys.nowhere.invalid/hooks/deploy",
        }.get(case, receiver.url)
        made = target(
            url, secret=OTHER_SECRET if case == "wrong secret" else RECEIVER_SECRET
        )
        if case == "denied":  # denied since it was saved (a name moved, say)
            settings.DEPLOY_TRIGGER_DENY_NETWORKS = ["127.0.0.0/8"]
        test = deploy_target_test_request(target=made, actor=Actor.system())
        assert test is not None
        deploy_target_test_run(test_id=test.pk, worker="w1")
    test.refresh_from_db()
    assert test.state == "done"
    assert test.summary() == expected
    # What it keeps says nothing more than that.
    kept = " ".join(
        str(value)
        for value in DeployTargetTest.objects.filter(pk=test.pk).values().get().values()
    )
    for word in (
        "refused",
        "timed",
        "Errno",
        "Connect",
        "Timeout",
        "Denied",
        "resolve",
    ):
        assert word not in kept


def test_a_test_no_worker_took_in_time_is_never_sent(operator_client):
    with Receiver() as receiver:
        made = target(receiver.url)
        test = deploy_target_test_request(target=made, actor=Actor.system())
        assert test is not None
        DeployTargetTest.objects.filter(pk=test.pk).update(
            requested_at=timezone.now() - timedelta(seconds=TEST_EXPIRES_SECONDS + 1)
        )
        page = operator_client.get(CHANGELIST).content.decode()
        assert f"not sent: no worker took it within {TEST_EXPIRES_SECONDS} s" in page
        assert REFRESH not in page
        assert deploy_target_test_run(test_id=test.pk, worker="w1") == "expired"
    assert receiver.received == []
    test.refresh_from_db()
    assert test.summary() == (
        f"not sent: no worker took it within {TEST_EXPIRES_SECONDS} s"
    )


def test_an_executor_that_calls_nothing_has_nothing_to_test(operator_client):
    made = DeployTarget(name="elsewhere", executor="external")
    deploy_target_save(target=made, secret="", actor=Actor.system())
    response = admin_action(
        operator_client,
        "deployments_deploytarget",
        "send_test_trigger",
        made,
        follow=True,
    )
    [message] = [str(m) for m in response.context["messages"]]
    assert message == "elsewhere: nothing to send: this executor calls nothing"
    assert not DeployTargetTest.objects.exists()
    assert not OperatorAction.objects.filter(action="test_deploy_target").exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_on_a_real_worker_the_list_shows_the_outcome_when_it_comes(
    workers, operator_client
):
    with Receiver() as receiver:
        made = target(receiver.url)
        # Clicked with no worker running: the web process sends nothing.
        admin_action(
            operator_client, "deployments_deploytarget", "send_test_trigger", made
        )
        page = operator_client.get(CHANGELIST).content.decode()
        assert "waiting for a worker" in page
        assert REFRESH in page
        assert receiver.received == []

        workers.start(env=FAST)
        workers.wait_until(
            lambda: (
                "delivered (HTTP 2xx)"
                in operator_client.get(CHANGELIST).content.decode()
            ),
            what="the test's outcome shown",
        )
    [seen] = receiver.received
    assert seen.verified, seen.error
    assert seen.webhook_id == DeployTargetTest.objects.get().message_id
    assert REFRESH not in operator_client.get(CHANGELIST).content.decode()
