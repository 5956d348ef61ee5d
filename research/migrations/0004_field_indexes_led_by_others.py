"""The indexes these fields made for themselves, each led by another index of its table
(named beside the field in the model), dropped: every row written paid for an entry in both
(docs/scaling.md, "Indexes a table does not need"). Concurrently on PostgreSQL
(``core.index_migrations.FieldIndexDrop``)."""

import django.db.models.deletion
from django.db import migrations, models

from core.index_migrations import FieldIndexDrop


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("research", "0003_revision_event_without_constraint"),
        ("webhooks", "0036_field_indexes_led_by_others"),
    ]

    operations = [
        FieldIndexDrop(
            model_name="citation",
            name="document",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="citations",
                to="research.researchdocument",
            ),
        ),
        FieldIndexDrop(
            model_name="documentrevision",
            name="document",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="revisions",
                to="research.researchdocument",
            ),
        ),
        FieldIndexDrop(
            model_name="documentrevision",
            name="inbox_event",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="revisions",
                to="webhooks.inboxevent",
            ),
        ),
    ]
