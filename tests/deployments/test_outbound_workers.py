"""Where a real worker's trigger goes, and for how long: a Celery worker (with its relay),
PostgreSQL and the broker, against listeners of the test's own. Loopback stands in for the
denied network (``DEPLOY_TRIGGER_DENY_NETWORKS`` with ``127.0.0.0/8``, for the worker only:
the targets were saved under the default list, so only the check at each attempt refuses
them); ``::1`` is the allowed receiver. The worker resolves names through a script of the
test's (tests/deployments/scripted_dns.py): a name that answers one address when it is
checked and another when it is connected to, and one that does not resolve at first."""

from __future__ import annotations

import json

import pytest

from core.actors import Actor
from deployments.models import Deployment, DeployTarget, TriggerAttempt
from deployments.targets import deploy_target_save
from tests import processes
from tests.core.factories import api_client_make, bearer_http
from tests.deployments import scripted_dns
from tests.deployments.factories import deployment_body, idempotent_post
from tests.deployments.receiver import RECEIVER_SECRET, Receiver
from tests.deployments.test_trigger_workers import FAST, wait_for
from tests.deployments.trickler import LATE_SECONDS, Trickler

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
]

DENY = "169.254.0.0/16,fe80::/10,127.0.0.0/8"


@pytest.fixture
def api_http():
    _, token = api_client_make(name="ci-outbound")
    return bearer_http(token)


def routed(api_http, name: str, url: str) -> Deployment:
    """A job whose repository only the target ``name`` (calling ``url``) matches."""
    target = DeployTarget(
        name=name,
        repository_pattern=f"acme/{name}",
        executor="http",
        url=url,
    )
    deploy_target_save(target=target, secret=RECEIVER_SECRET, actor=Actor.system())
    body = deployment_body(repository=f"acme/{name}")
    response = idempotent_post(api_http, "/api/deployments/", body, f"key-{name}")
    assert response.status_code == 202, response.content
    return Deployment.objects.get(public_id=response.json()["deployment_id"])


def scripted_worker(tmp_path, script, env: dict[str, str]) -> processes.Process:
    return processes.Process(
        [
            str(processes.BIN / "python"),
            "-m",
            "tests.deployments.scripted_dns",
            str(script),
            *processes.celery_worker_command(),
        ],
        processes.child_env(**{**FAST, "CELERY_METRICS_PORT": "0", **env}),
        tmp_path / "worker.log",
    )


def attempts(job: Deployment) -> list[tuple[int, str, str]]:
    return list(
        TriggerAttempt.objects.filter(job=job)
        .order_by("number")
        .values_list("number", "outcome", "error_class")
    )


def test_a_worker_sends_nothing_to_a_denied_address_in_any_form_or_at_any_lookup(
    tmp_path, workers, api_http
):
    with (
        Receiver(host="::1") as allowed,
        Receiver(host="127.0.0.1", port=allowed.port) as trap,
    ):
        port = allowed.port
        script = tmp_path / "names.json"
        script.write_text(
            json.dumps(
                {
                    # Checked as ::1, then connected to as 127.0.0.1 (rebinding).
                    "ci-rebind.test": [["::1"], ["127.0.0.1"]],
                    # No answer when it is checked, 127.0.0.1 once it is connected to.
                    "ci-late.test": [[], ["127.0.0.1"]],
                }
            )
        )
        denied = {
            name: routed(api_http, name, f"http://{host}:{port}/hooks/deploy")
            for name, host in [
                ("mapped", "[::ffff:127.0.0.1]"),
                ("mapped-hex", "[::ffff:7f00:1]"),
                ("decimal", "2130706433"),
                ("localhost", "localhost"),
            ]
        }
        rebind = routed(
            api_http, "rebind", f"http://ci-rebind.test:{port}/hooks/deploy"
        )
        late = routed(api_http, "late", f"http://ci-late.test:{port}/hooks/deploy")
        workers.add(
            scripted_worker(
                tmp_path,
                script,
                {
                    "DEPLOY_EXECUTOR": "simulated",
                    "DEPLOY_TRIGGER_DENY_NETWORKS": DENY,
                },
            )
        )
        jobs = [*denied.values(), rebind, late]
        wait_for(
            workers,
            jobs,
            lambda j: j.status in {"running", "failed"},
            timeout=90,
            what="every job triggered or refused",
        )

    assert trap.received == []  # nothing ever reached the denied address
    for name, job in denied.items():
        assert job.status == "failed", name
        assert attempts(job) == [(1, "rejected", "DeniedDestination")], name
    # Rebinding: the worker looked the name up once, checked ::1 and connected to it; the
    # request kept its name.
    assert rebind.status == "running", rebind.detail
    assert attempts(rebind) == [(1, "delivered", "")]
    [request] = allowed.requests_for(rebind.public_id)
    assert request.headers["host"] == f"ci-rebind.test:{port}"
    assert scripted_dns.lookups(script, "ci-rebind.test") == 1
    # A name that does not resolve is not called: transient, then refused once it does.
    assert late.status == "failed"
    assert attempts(late) == [
        (1, "transient", "ConnectError"),
        (2, "rejected", "DeniedDestination"),
    ]
    assert "does not resolve" in late.trigger_attempts.get(number=1).error
    assert scripted_dns.lookups(script, "ci-late.test") == 2


def test_a_receiver_trickling_its_answer_holds_an_attempt_no_longer_than_the_timeout(
    workers, api_http
):
    """One byte every 0.25 s: no read ever waits 1 s, and each attempt still ends within
    ``DEPLOY_HTTP_TIMEOUT_SECONDS`` (1): ambiguous (the request was sent), retried once,
    then the job fails."""
    with Trickler(part="headers", interval=0.25) as trickler:
        job = routed(api_http, "trickle", trickler.url)
        workers.start(
            env={
                **FAST,
                "DEPLOY_EXECUTOR": "simulated",
                "DEPLOY_TRIGGER_MAX_ATTEMPTS": "2",
            }
        )
        wait_for(
            workers,
            [job],
            lambda j: j.status == "failed",
            timeout=90,
            what="the job failed after two attempts",
        )
        processes.wait_until(trickler.all_ended, timeout=10, what="callers hung up")

    made = list(TriggerAttempt.objects.filter(job=job).order_by("number"))
    assert [(a.outcome, a.error_class) for a in made] == [
        ("ambiguous", "ReadTimeout"),
        ("ambiguous", "ReadTimeout"),
    ]
    # Each within its 1 s timeout, and a busy machine's lateness (far below the trickle).
    bound = 1 + LATE_SECONDS
    assert bound < trickler.lasts()
    assert all(a.duration_seconds < bound for a in made), [
        a.duration_seconds for a in made
    ]
    assert len(trickler.connections) == 2
    assert all(c.request_line.startswith("POST ") for c in trickler.connections)
    # The listener saw the caller hang up within the timeout (and a send or two after).
    assert all(c.held_seconds < bound + 1 for c in trickler.connections), [
        c.held_seconds for c in trickler.connections
    ]
