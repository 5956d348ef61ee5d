"""The own indexes of the seal entries' seal and a checkpoint delivery's checkpoint, each led by
another index of its table, dropped."""

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
