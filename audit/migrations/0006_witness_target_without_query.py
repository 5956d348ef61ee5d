"""Deliveries to the witness name it without user info or query (a fingerprint of the query
in its place): the rows recorded with the whole URL are named so too, which takes a token in
it out of the database. Written out here as ``audit.checkpoints.witness_target`` did it when
this migration was made."""

import hashlib
from urllib.parse import urlsplit, urlunsplit

from django.db import migrations, models


def _witness_target(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    shown = urlunsplit((parts.scheme, host, parts.path, "", ""))[:500]
    if not parts.query:
        return shown
    fingerprint = "sha256:" + hashlib.sha256(parts.query.encode()).hexdigest()[:12]
    return f"{shown} (query {fingerprint})"


def targets_without_query(apps, schema_editor):
    deliveries = apps.get_model("audit", "LogCheckpointDelivery").objects
    for target in (
        deliveries.filter(
            models.Q(target__contains="?") | models.Q(target__contains="@")
        )
        .values_list("target", flat=True)
        .distinct()
    ):
        named = _witness_target(target)
        if named == target:
            continue
        # A checkpoint already delivered under the new name keeps that row only.
        deliveries.filter(
            target=target,
            checkpoint__in=deliveries.filter(target=named).values("checkpoint"),
        ).delete()
        deliveries.filter(target=target).update(target=named)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0005_log_cursors"),
    ]

    operations = [
        migrations.AlterField(
            model_name="logcheckpointdelivery",
            name="target",
            field=models.TextField(
                help_text="The witness's URL without user info or query (a fingerprint "
                "of the query in its place): audit.checkpoints.witness_target."
            ),
        ),
        migrations.RunPython(targets_without_query, migrations.RunPython.noop),
    ]
