"""The own indexes of a target's name, a target test's target and a trigger attempt's job, each
led by another index of its table, dropped."""

import django.db.models.deletion
from django.db import migrations, models

from core.index_migrations import FieldIndexDrop


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("deployments", "0013_traceparent"),
    ]

    operations = [
        FieldIndexDrop(
            model_name="deploytarget",
            name="name",
            field=models.SlugField(db_index=False, max_length=64),
        ),
        FieldIndexDrop(
            model_name="deploytargettest",
            name="target",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="tests",
                to="deployments.deploytarget",
            ),
        ),
        FieldIndexDrop(
            model_name="triggerattempt",
            name="job",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="trigger_attempts",
                to="deployments.job",
            ),
        ),
    ]
