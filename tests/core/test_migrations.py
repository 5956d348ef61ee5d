"""Models that moved between apps keep their rows, and the permissions groups hold on them.

The database is taken back to the layout before the move, filled as it was then, and migrated
forward again, as an existing deployment would be."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.migrations]

BEFORE_THE_MOVE = [
    ("core", "0001_initial"),
    ("webhooks", "0001_initial"),
    ("audit", "0001_initial"),
    ("deployments", "0001_initial"),
    ("research", "0001_initial"),
    ("contenttypes", "0002_remove_content_type_name"),
    ("auth", "0012_alter_user_first_name_max_length"),
]


def migrate(targets):
    """Migrates to ``targets`` (``(app, None)``: none of that app) and returns the apps as
    they were there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state([t for t in targets if t[1]]).apps


def latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def back_to_before_the_move():
    # The app that did not exist yet goes too.
    yield migrate([*BEFORE_THE_MOVE, ("idempotency", None)])
    migrate(latest())  # whatever the test did, the database ends where it started


def test_moved_models_keep_their_rows_and_their_permissions(back_to_before_the_move):
    old = back_to_before_the_move
    content_type = old.get_model("contenttypes", "ContentType")
    permission = old.get_model("auth", "Permission")
    group = old.get_model("auth", "Group")
    api_client = old.get_model("core", "ApiClient").objects.create(
        name="ci", token_hash="h" * 64, token_prefix="t"
    )
    now = timezone.now()
    old.get_model("deployments", "IdempotencyRecord").objects.create(
        client_id=api_client.pk,
        operation_type="deployment.create",
        key="k-1",
        fingerprint="f" * 64,
        expires_at=now,
    )
    job = old.get_model("audit", "BulkReplayJob").objects.create(reason="incident 7")
    old.get_model("audit", "OperatorAction").objects.create(
        action="bulk_replay", actor_name="ops", bulk_job_id=job.pk, event_count=3
    )
    bulk_type, _ = content_type.objects.get_or_create(
        app_label="audit", model="bulkreplayjob"
    )
    add_job, _ = permission.objects.get_or_create(
        content_type=bulk_type, codename="add_bulkreplayjob", defaults={"name": "x"}
    )
    operators = group.objects.create(name="Operators-before")
    operators.permissions.add(add_job)

    new = migrate(latest())

    record = new.get_model("idempotency", "IdempotencyRecord").objects.get()
    assert (record.key, record.client_id) == ("k-1", api_client.pk)
    action = new.get_model("trail", "OperatorAction").objects.get()
    assert (action.actor_name, action.event_count) == ("ops", 3)
    assert action.bulk_job.reason == "incident 7"
    moved = new.get_model("auth", "Group").objects.get(name="Operators-before")
    assert [
        (p.content_type.app_label, p.codename) for p in moved.permissions.all()
    ] == [("webhooks", "add_bulkreplayjob")]
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
    assert "webhooks_operatoraction" in tables
    assert "idempotency_idempotencyrecord" in tables
    assert "audit_operatoraction" not in tables
    assert "deployments_idempotencyrecord" not in tables


@pytest.fixture
def before_the_body_key():
    yield migrate([("webhooks", "0005_bulk_replay_runs")])
    migrate(latest())


def test_copies_of_a_github_body_stored_before_the_body_key_still_migrate(
    before_the_body_key,
):
    """A deployment that already accepted a replayed GitHub body holds two rows with one
    payload hash: the first keeps the key, the copy stays without it, and the unique index
    is built over that history."""
    old = before_the_body_key
    source = old.get_model("webhooks", "WebhookSource")
    github = source.objects.create(slug="gh", scheme="github", handler="github")
    research = source.objects.create(slug="rs", handler="research")
    inbox = old.get_model("webhooks", "InboxEvent")
    for owner, event_id, digest in [
        (github, "d-1", "a" * 64),
        (github, "d-2-replayed", "a" * 64),
        (github, "d-3", "b" * 64),
        (research, "evt-1", "a" * 64),
    ]:
        inbox.objects.create(
            source=owner,
            event_id=event_id,
            event_type="ping",
            payload_hash=digest,
            content_fingerprint=digest,
            raw_body=b"{}",
        )

    new = migrate(latest())

    keys = dict(
        new.get_model("webhooks", "InboxEvent").objects.values_list(
            "event_id", "body_key"
        )
    )
    assert keys == {
        "d-1": "a" * 64,
        "d-2-replayed": None,
        "d-3": "b" * 64,
        "evt-1": None,
    }
