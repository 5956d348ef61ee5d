"""What a trigger started (docs/http-api.md, "What a trigger started"): the ``downstream`` of
a job, answered by the API, recorded on the attempt that delivered it, in that attempt's log
leaf and so in the deployment's evidence bundle, checked offline. An ``http`` receiver names
its run in its 2xx JSON answer (tests/deployments/receiver.py answers as a deduplicating CI
system does); what it says is kept only in a shape every reader can trust."""

from __future__ import annotations

import copy
import json

import pytest
from django.core.management import call_command

from audit import verify_bundle
from audit.checkpoints import checkpoint_make, log_verifier_key
from audit.ledgers import LEDGERS
from deployments.downstream import downstream_make, downstream_of_answer
from deployments.models import Deployment, TriggerAttempt
from deployments.services.attempts import job_run
from tests.audit.ledger_rows import seal_all
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import build_body, deployment_body, idempotent_post
from tests.deployments.receiver import Fault, Receiver


@pytest.fixture
def receiver(settings):
    with Receiver() as receiving:
        settings.DEPLOY_EXECUTOR = "http"
        settings.DEPLOY_HTTP_URL = receiving.url
        settings.DEPLOY_HTTP_SECRET = receiving.secret
        settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 2
        settings.DEPLOY_TRIGGER_RETRY_BASE_SECONDS = 0.01
        yield receiving


@pytest.fixture
def http():
    _, token = api_client_make(name="ci")
    return bearer_http(token)


def create(http, key: str, path: str = "/api/deployments/") -> Deployment:
    body = build_body() if "builds" in path else deployment_body()
    answer = idempotent_post(http, path, body, key=key)
    assert answer.status_code == 202, answer.content
    assert answer.json()["downstream"] is None  # nothing started yet
    field = "build_id" if "builds" in path else "deployment_id"
    return answer.json()[field]


def run(public_id: str, kind: str = "deployment") -> str:
    return job_run(kind=kind, public_id=public_id, worker="w1")


# --- what a receiver's answer may say ---------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"id": "run-7", "url": "https://ci.example/runs/7"}',
            {"system": "http", "id": "run-7", "url": "https://ci.example/runs/7"},
        ),
        (b'{"id": 7}', {"system": "http", "id": 7, "url": None}),
        (
            b'{"url": "https://ci.example/runs/7"}',
            {"system": "http", "id": None, "url": "https://ci.example/runs/7"},
        ),
        # A token in the link's query, or user information, is never recorded.
        (
            b'{"id": "7", "url": "https://ci.example/runs/7?token=s3cret#top"}',
            {"system": "http", "id": "7", "url": "https://ci.example/runs/7"},
        ),
        (
            b'{"id": "7", "url": "https://u:p@ci.example/runs/7"}',
            {"system": "http", "id": "7", "url": None},
        ),
        (
            b'{"id": "7", "url": "javascript:alert(1)"}',
            {"system": "http", "id": "7", "url": None},
        ),
        (b'{"id": true, "url": "ftp://ci.example/x"}', None),
        (b'{"id": ["7"]}', None),
        (b'{"id": ""}', None),
        (b'{"id": "a\\nb"}', None),
        (json.dumps({"id": "x" * 201}).encode(), None),
        (json.dumps({"id": 2**63}).encode(), None),
        (b'[{"id": "7"}]', None),
        (b'{"accepted": true}', None),
        (b"accepted", None),
        (b"", None),
        (b"\xff\xfe", None),
    ],
)
def test_a_receiver_s_answer_is_kept_only_in_a_shape_every_reader_trusts(
    body, expected
):
    assert downstream_of_answer(body) == expected


def test_a_downstream_names_a_known_system():
    with pytest.raises(ValueError, match="no downstream system"):
        downstream_make(system="gitlab", id=1)


# --- the API, the attempt, the log ---------------------------------------------------------


@pytest.mark.django_db
def test_the_run_a_receiver_started_is_the_job_s_downstream_and_its_attempt_s(
    http, receiver
):
    deployment_id = create(http, "k-down")
    assert run(deployment_id) == "triggered"

    answer = http.get(f"/api/deployments/{deployment_id}/").json()
    expected = {
        "system": "http",
        "id": f"run-{deployment_id}",
        "url": f"{receiver.http.url}/runs/{deployment_id}",
    }
    assert answer["downstream"] == expected
    [attempt] = TriggerAttempt.objects.filter(job__public_id=deployment_id)
    assert attempt.downstream == expected
    # The list by key answers the same job, downstream included.
    [listed] = http.get("/api/deployments/?idempotency_key=k-down").json()["results"]
    assert listed["downstream"] == expected
    # The replay of the first request is its first answer, byte for byte: nothing
    # started then.
    replay = idempotent_post(http, "/api/deployments/", deployment_body(), key="k-down")
    assert replay.status_code == 200
    assert replay.json()["downstream"] is None


@pytest.mark.django_db
def test_a_build_s_downstream_is_answered_too(http, receiver):
    build_id = create(http, "k-build", path="/api/builds/")
    assert run(build_id, kind="build") == "triggered"
    answer = http.get(f"/api/builds/{build_id}/").json()
    assert answer["downstream"]["id"] == f"run-{build_id}"


@pytest.mark.django_db
def test_an_answer_that_names_nothing_leaves_the_downstream_null(http, receiver):
    receiver.reply_body = {"accepted": True}
    deployment_id = create(http, "k-none")
    assert run(deployment_id) == "triggered"
    assert http.get(f"/api/deployments/{deployment_id}/").json()["downstream"] is None
    [attempt] = TriggerAttempt.objects.filter(job__public_id=deployment_id)
    assert attempt.outcome == "delivered"
    assert attempt.downstream is None


@pytest.mark.django_db
def test_a_receiver_that_echoes_the_secret_has_nothing_of_it_kept(http, receiver):
    receiver.reply_body = {"id": receiver.secret, "url": "https://ci.example/runs/9"}
    deployment_id = create(http, "k-echo")
    assert run(deployment_id) == "triggered"
    downstream = http.get(f"/api/deployments/{deployment_id}/").json()["downstream"]
    assert downstream == {
        "system": "http",
        "id": None,
        "url": "https://ci.example/runs/9",
    }


@pytest.mark.django_db
def test_only_the_delivered_attempt_says_what_started(http, receiver):
    deployment_id = create(http, "k-retry")
    receiver.plan(deployment_id, Fault.status(503))
    assert run(deployment_id) == "retry_scheduled"
    Deployment.objects.filter(public_id=deployment_id).update(next_attempt_at=None)
    assert run(deployment_id) == "triggered"
    downstreams = list(
        TriggerAttempt.objects.filter(job__public_id=deployment_id)
        .order_by("number")
        .values_list("outcome", "downstream")
    )
    assert [outcome for outcome, _ in downstreams] == ["transient", "delivered"]
    assert downstreams[0][1] is None
    assert downstreams[1][1]["id"] == f"run-{deployment_id}"


@pytest.mark.django_db
def test_a_leaf_holds_the_downstream_only_when_there_is_one(http, receiver):
    """Attempts logged before the field existed have none in their leaf: a null one is left
    out, so that their leaves are still the leaves their rows give."""
    deployment_id = create(http, "k-leaf")
    receiver.plan(deployment_id, Fault.status(503))
    assert run(deployment_id) == "retry_scheduled"
    Deployment.objects.filter(public_id=deployment_id).update(next_attempt_at=None)
    assert run(deployment_id) == "triggered"
    ledger = LEDGERS["trigger_attempt"]
    rows = (
        TriggerAttempt.objects.filter(job__public_id=deployment_id)
        .order_by("number")
        .values_list(*ledger.columns())
    )
    first, second = ledger.leaf_fields(rows)
    assert "downstream" not in first
    assert second["downstream"]["id"] == f"run-{deployment_id}"


@pytest.mark.django_db(transaction=True)
def test_the_bundle_proves_what_the_trigger_started_offline(
    http, receiver, settings, capsys
):
    """``Idempotency-Key`` -> job -> run in one bundle: the delivered attempt's leaf names
    the run, the verifier says so, and a changed run id fails the proof."""
    deployment_id = create(http, "k-bundle")
    assert run(deployment_id) == "triggered"
    seal_all()
    checkpoint_make()
    call_command("audit_bundle", "deployment", deployment_id)
    bundle = json.loads(capsys.readouterr().out)

    leaves = [json.loads(entry["leaf"]) for entry in bundle["entries"]]
    [attempt] = [leaf for leaf in leaves if leaf["kind"] == "trigger_attempt"]
    [job] = [leaf for leaf in leaves if leaf["kind"] == "deployment"]
    assert job["idempotency_key"] == "k-bundle"
    assert attempt["downstream"]["id"] == f"run-{deployment_id}"
    report = verify_bundle.bundle_verify(bundle, vkey=log_verifier_key())
    assert report.ok, report.failures
    assert any(
        f"it started http run-{deployment_id}" in line for line in report.checked
    )

    changed = copy.deepcopy(bundle)
    for entry in changed["entries"]:
        entry["leaf"] = entry["leaf"].replace(
            f'"run-{deployment_id}"', '"run-someone-else"'
        )
    assert not verify_bundle.bundle_verify(changed, vkey=log_verifier_key()).ok


def test_the_verifier_names_a_downstream_that_does_not_hold_together():
    context = verify_bundle.BundleContext(bodies={}, entries={})
    check = verify_bundle.downstream_check
    assert check({"kind": "trigger_attempt"}, context) == []
    good = {"system": "github-actions", "id": 7, "url": "https://github.com/a/b"}
    assert check({"downstream": good}, context) == []
    assert check({"downstream": {**good, "system": "gitlab"}}, context)
    assert check({"downstream": {**good, "id": True}}, context)
    assert check({"downstream": {**good, "url": "javascript:x"}}, context)
    assert check({"downstream": {**good, "id": None, "url": None}}, context)
    assert check({"downstream": {"system": "http"}}, context)
    assert check({"downstream": "run-7"}, context)


@pytest.mark.django_db
def test_the_admin_links_the_job_and_its_attempt_to_what_started(
    http, receiver, client, django_user_model
):
    deployment_id = create(http, "k-admin")
    assert run(deployment_id) == "triggered"
    user = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    client.force_login(user)
    pk = Deployment.objects.get(public_id=deployment_id).pk

    page = client.get(f"/admin/deployments/deployment/{pk}/change/").content.decode()

    link = (
        f'<a href="{receiver.http.url}/runs/{deployment_id}" rel="noopener noreferrer" '
        f'target="_blank">http run-{deployment_id}</a>'
    )
    assert page.count(link) == 2  # the job's field and its delivered attempt's
    # The run's id finds its job.
    listed = client.get(
        "/admin/deployments/deployment/", {"q": f"run-{deployment_id}"}
    ).content.decode()
    assert deployment_id in listed
    other = client.get("/admin/deployments/deployment/", {"q": "run-nobody"})
    assert deployment_id not in other.content.decode()
