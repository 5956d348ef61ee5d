"""The own indexes of a citation's document and a revision's document and inbox event, each led
by another index of its table, dropped: three index entries fewer per research event applied."""

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
