"""Migration 0009 (one job table) on a database that had deployments and builds in tables of
their own, with their transitions, status syncs and attempts, all in the verifiable log: the
database is taken back to deployments 0008, filled and logged as the code of then did (its
ledgers' fields are written out here), migrated forward, and back again
(docs/subsystems/executors.md, "Migration 0009: one job table")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from audit.leaves import LeafInput
from audit.ledgers import LEDGERS, leaf_value
from audit.log import log_append
from audit.models import LogLeaf
from audit.sealer import unlogged
from audit.verification import log_verify
from deployments.models import Build, Deployment
from tests.core.factories import api_client_make, bearer_http
from tests.core.test_migrations import latest, migrate

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.migrations]

BEFORE = [("deployments", "0008_deploy_target_clients_and_tests")]

# The leaves as the ledgers of deployments 0008 wrote them.
JOB = (
    "public_id",
    "client_id",
    "idempotency_key",
    "repository",
    "commit_sha",
    "workflow",
    "triggered_by",
    "created_at",
)
OLD_FIELDS = {
    "deployment": (*JOB, "environment"),
    "build": (*JOB, "ref"),
    "job_transition": (
        "deployment_id",
        "build_id",
        "from_status",
        "to_status",
        "at",
        "actor",
        "detail",
        "recorded_at",
    ),
    "status_sync": (
        "public_id",
        "client_id",
        "deployment_id",
        "build_id",
        "status",
        "reported_at",
        "detail",
        "applied",
        "resulting_status",
        "created_at",
    ),
    "trigger_attempt": (
        "deployment_id",
        "build_id",
        "number",
        "executor",
        "target_name",
        "url",
        "started_at",
        "finished_at",
        "outcome",
        "status_code",
        "error_class",
        "error",
        "duration_seconds",
        "retry_at",
        "worker",
    ),
}
OLD_MODELS = {
    "deployment": "Deployment",
    "build": "Build",
    "job_transition": "JobTransition",
    "status_sync": "StatusSync",
    "trigger_attempt": "TriggerAttempt",
}


@pytest.fixture
def before_one_table():
    yield migrate(BEFORE)
    migrate(latest())


def _old_fill(old, client) -> None:
    """Two deployments and four builds (ids 1 and 2, and 1 to 4: they overlap), each moved
    to running by a transition, with a status sync and a closed trigger attempt."""
    now = timezone.now() - timedelta(hours=1)
    jobs = []
    for n in range(2):
        jobs.append(
            old.get_model("deployments", "Deployment").objects.create(
                id=1 + n,
                public_id=f"dep_{n:024d}",
                client_id=client.pk,
                idempotency_key=f"dep-{n}",
                repository="acme/shop",
                commit_sha="a" * 40,
                environment="prod",
                status="running",
            )
        )
    for n in range(4):
        jobs.append(
            old.get_model("deployments", "Build").objects.create(
                id=1 + n,
                public_id=f"bld_{n:024d}",
                client_id=client.pk,
                idempotency_key=f"bld-{n}",
                repository="acme/shop",
                commit_sha="b" * 40,
                ref=f"refs/heads/b{n}",
                status="running",
            )
        )
    for n, job in enumerate(jobs):
        kind = "deployment" if job.public_id.startswith("dep_") else "build"
        old.get_model("deployments", "JobTransition").objects.create(
            **{kind: job},
            from_status="queued",
            to_status="running",
            at=now,
            actor="worker:w/1",
        )
        old.get_model("deployments", "StatusSync").objects.create(
            **{kind: job},
            public_id=f"ss_{n:024d}",
            client_id=client.pk,
            status="running",
            reported_at=now,
            applied=True,
            resulting_status="running",
        )
        old.get_model("deployments", "TriggerAttempt").objects.create(
            **{kind: job},
            number=1,
            executor="http",
            url="https://ci.example/hook",
            started_at=now,
            finished_at=now + timedelta(seconds=1),
            outcome="delivered",
            status_code=202,
            duration_seconds=0.5,
        )


def _old_log(old) -> int:
    """Every row in the log, its leaf as the sealer of then made it; the log's size."""
    leaves = []
    for kind, fields in OLD_FIELDS.items():
        model = old.get_model("deployments", OLD_MODELS[kind])
        for row in model.objects.order_by("pk").values("pk", *fields):
            leaves.append(
                LeafInput(
                    kind=kind,
                    record_id=row["pk"],
                    fields={name: leaf_value(row[name]) for name in fields},
                )
            )
    log_append(leaves=leaves)
    return len(leaves)


def _snapshot(apps) -> dict[str, list[dict]]:
    return {
        name: list(apps.get_model("deployments", name).objects.order_by("pk").values())
        for name in OLD_MODELS.values()
    }


def test_jobs_move_to_one_table_and_back_and_the_log_verifies(
    before_one_table, admin_client, capsys
):
    old = before_one_table
    client, token = api_client_make()
    _old_fill(old, client)
    size = _old_log(old)
    before = _snapshot(old)
    old_builds = {row["public_id"]: row["id"] for row in before["Build"]}
    deployment_ids = {row["id"] for row in before["Deployment"]}
    # The builds' ids overlap the deployments': they must move.
    assert deployment_ids & set(old_builds.values())

    migrate(latest())

    # No leaf already in the log changed, and every row is one of them.
    report = log_verify()
    assert report.ok, report.problems
    assert report.entries_checked == size
    for kind in OLD_FIELDS:
        assert not unlogged(LEDGERS[kind]).exists(), kind
    assert LogLeaf.objects.count() == size
    call_command("audit_verify")
    assert "FAILED" not in capsys.readouterr().err

    # The public ids, and what the API answers for them, are as they were.
    assert sorted(Deployment.objects.values_list("public_id", flat=True)) == sorted(
        row["public_id"] for row in before["Deployment"]
    )
    assert sorted(Build.objects.values_list("public_id", flat=True)) == sorted(
        old_builds
    )
    http = bearer_http(token)
    for row in before["Build"]:
        answer = http.get(f"/api/builds/{row['public_id']}/")
        assert answer.status_code == 200
        assert answer.json()["build_id"] == row["public_id"]
        assert answer.json()["ref"] == row["ref"]
        assert http.get(f"/api/deployments/{row['public_id']}/").status_code == 404
    for row in before["Deployment"]:
        answer = http.get(f"/api/deployments/{row['public_id']}/")
        assert answer.json()["deployment_id"] == row["public_id"]
        assert answer.json()["environment"] == "prod"
    listed = http.get("/api/builds/").json()["results"]
    assert sorted(item["build_id"] for item in listed) == sorted(old_builds)

    # Each build took its transitions, syncs and attempts with it, and keeps its old id.
    for public_id, old_id in old_builds.items():
        build = Build.objects.get(public_id=public_id)
        assert build.ledger_id == old_id and build.record_id == old_id
        assert build.pk not in old_builds.values()
        assert build.transitions.get().to_status == "running"
        assert build.status_syncs.count() == build.trigger_attempts.count() == 1
        assert type(build.transitions.get().job) is Build
        # Its old admin address leads to its page.
        moved = admin_client.get(f"/admin/deployments/build/{old_id}/change/")
        assert moved.status_code == 302
        assert moved["Location"] == f"/admin/deployments/build/{build.pk}/change/"
        assert admin_client.get(moved["Location"]).status_code == 200

    # A new build after the move is logged under an id no old build had.
    new = Build.objects.create(
        client=client,
        idempotency_key="new",
        repository="acme/shop",
        commit_sha="c" * 40,
    )
    assert new.kind == "build" and new.record_id not in old_builds.values()
    assert not Deployment.objects.filter(pk=new.pk).exists()
    new.delete()

    old_again = migrate(BEFORE)
    assert _snapshot(old_again) == before
