"""The own indexes of the attempts' event, a secret's and a signature failure's source and the
sources' slug, each led by another index of its table, dropped (docs/scaling.md, "Indexes a
table does not need")."""

import django.db.models.deletion
from django.db import migrations, models

from core.index_migrations import FieldIndexDrop


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("webhooks", "0035_inbox_source_last_index_drop"),
    ]

    operations = [
        FieldIndexDrop(
            model_name="inboxattempt",
            name="event",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="attempt_log",
                to="webhooks.inboxevent",
            ),
        ),
        FieldIndexDrop(
            model_name="signaturefailure",
            name="source",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="signature_failures",
                to="webhooks.webhooksource",
            ),
        ),
        FieldIndexDrop(
            model_name="webhooksecret",
            name="source",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="secrets",
                to="webhooks.webhooksource",
            ),
        ),
        FieldIndexDrop(
            model_name="webhooksource",
            name="slug",
            field=models.SlugField(db_index=False, max_length=64),
        ),
    ]
