"""The deduplication ledger (docs/subsystems/inbox.md, "The deduplication ledger"): created,
filled with a key for every inbox row in one set statement, and then the inbox's own unique
constraints dropped, since the ledger decides from now on. A mismatch's evidence names its
event's row without a foreign key constraint: kept whether or not the row still is. On a
large inbox the copy takes several seconds per million rows, under the migration's lock of
the inbox (docs/scaling.md, "Upgrading a large inbox").

SQLite (the embedded default) keeps the inbox's unique index on (source, event_id) in its
table: dropping it there means rebuilding the table, which cannot rebuild the inbox's NULLS
LAST index (migration 0009). It agrees with the ledger, which decides there too, so it only
stands by."""

import django.db.models.deletion
from django.db import migrations, models

BACKFILL = """
INSERT INTO webhooks_inboxkey
       (inbox_event_id, source_id, event_id, body_key, content_fingerprint, received_at,
        delivery_count)
SELECT id, source_id, event_id, body_key, content_fingerprint, received_at, delivery_count
  FROM webhooks_inboxevent
"""

UNIQUE_CONSTRAINTS = (
    "webhooks_inbox_source_event_uniq",
    "webhooks_inbox_source_body_uniq",
)


def _constraints(apps):
    model = apps.get_model("webhooks", "InboxEvent")
    named = {c.name: c for c in model._meta.constraints}
    return model, [named[name] for name in UNIQUE_CONSTRAINTS]


def constraints_drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    model, constraints = _constraints(apps)
    for constraint in constraints:
        schema_editor.remove_constraint(model, constraint)


def constraints_create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    model, constraints = _constraints(apps)
    for constraint in constraints:
        schema_editor.add_constraint(model, constraint)


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0028_traceparent"),
    ]

    operations = [
        migrations.CreateModel(
            name="InboxKey",
            fields=[
                (
                    "inbox_event",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="key",
                        serialize=False,
                        to="webhooks.inboxevent",
                    ),
                ),
                (
                    "source",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="webhooks.webhooksource",
                    ),
                ),
                ("event_id", models.CharField(max_length=128)),
                ("body_key", models.CharField(blank=True, max_length=64, null=True)),
                ("content_fingerprint", models.CharField(max_length=64)),
                ("received_at", models.DateTimeField()),
                ("delivery_count", models.PositiveIntegerField(default=1)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("source", "event_id"),
                        name="webhooks_key_source_event_uniq",
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("body_key__isnull", False)),
                        fields=("source", "body_key"),
                        name="webhooks_key_source_body_uniq",
                    ),
                ],
            },
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        # Evidence names its event by the key: kept whether or not the row still is.
        migrations.AlterField(
            model_name="fingerprintmismatch",
            name="event",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="mismatches",
                to="webhooks.inboxevent",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="inboxevent", name=name)
                for name in UNIQUE_CONSTRAINTS
            ],
            database_operations=[
                migrations.RunPython(constraints_drop, constraints_create)
            ],
        ),
    ]
