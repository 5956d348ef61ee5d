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
        ("audit", "0007_inbox_hourly_figures"),
    ]

    operations = [
        FieldIndexDrop(
            model_name="auditsealactionentry",
            name="seal",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="action_entries",
                to="audit.auditseal",
            ),
        ),
        FieldIndexDrop(
            model_name="auditsealentry",
            name="seal",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="entries",
                to="audit.auditseal",
            ),
        ),
        FieldIndexDrop(
            model_name="logcheckpointdelivery",
            name="checkpoint",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="deliveries",
                to="audit.logcheckpoint",
            ),
        ),
    ]
