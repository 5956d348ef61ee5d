"""Seals become keyed and versioned, and hold operator actions too.

Existing seals are version 1: their row digests (id, payload hash, received time) stay as they
are, and ``audit_verify`` keeps checking their rows with that digest. Their links are re-keyed
here: each seal whose plain-SHA-256 link still checks out gets the keyed hash
(``audit.chain.seal_mac``) and the re-keyed hash of its predecessor. A seal whose old link does
not check out is left as it is, so that ``audit_verify`` names it after the upgrade as it did
before. Needs ``AUDIT_SEAL_KEY``, as every later run does."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from audit.chain import GENESIS_HASH, legacy_seal_hash, seal_mac

BATCH = 1000


def _rewrite(AuditSeal, seals):
    if seals:
        AuditSeal.objects.bulk_update(seals, ["previous_hash", "seal_hash"])
        seals.clear()


def legacy_chain_rekey(apps, schema_editor):
    AuditSeal = apps.get_model("audit", "AuditSeal")
    key = settings.AUDIT_SEAL_KEY
    old_previous = new_previous = GENESIS_HASH
    changed = []
    for seal in AuditSeal.objects.order_by("sequence").iterator(chunk_size=BATCH):
        old_hash = seal.seal_hash
        intact = seal.previous_hash == old_previous and old_hash == legacy_seal_hash(
            previous_hash=seal.previous_hash,
            rows_hash=seal.rows_hash,
            sequence=seal.sequence,
            row_count=seal.row_count,
        )
        if intact:
            seal.previous_hash = new_previous
            seal.seal_hash = seal_mac(key=key, seal=seal)
            changed.append(seal)
            if len(changed) >= BATCH:
                _rewrite(AuditSeal, changed)
        old_previous, new_previous = old_hash, seal.seal_hash
    _rewrite(AuditSeal, changed)


def legacy_chain_unkey(apps, schema_editor):
    """Back to plain SHA-256 links, for the code before this migration; refused once seals of
    version 2 exist (that code could not read them)."""
    AuditSeal = apps.get_model("audit", "AuditSeal")
    if AuditSeal.objects.exclude(version=1).exists():
        raise RuntimeError("seals of version 2 exist: the upgrade cannot be undone")
    key = settings.AUDIT_SEAL_KEY
    old_previous = new_previous = GENESIS_HASH
    changed = []
    for seal in AuditSeal.objects.order_by("sequence").iterator(chunk_size=BATCH):
        keyed_hash = seal.seal_hash
        if seal.previous_hash == new_previous and keyed_hash == seal_mac(
            key=key, seal=seal
        ):
            seal.previous_hash = old_previous
            seal.seal_hash = legacy_seal_hash(
                previous_hash=seal.previous_hash,
                rows_hash=seal.rows_hash,
                sequence=seal.sequence,
                row_count=seal.row_count,
            )
            changed.append(seal)
            if len(changed) >= BATCH:
                _rewrite(AuditSeal, changed)
        new_previous, old_previous = keyed_hash, seal.seal_hash
    _rewrite(AuditSeal, changed)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0002_operator_actions_to_webhooks"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditseal",
            name="version",
            field=models.PositiveSmallIntegerField(default=1),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="auditseal",
            name="action_count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="auditseal",
            name="actions_hash",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="auditseal",
            name="first_action_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="auditseal",
            name="last_action_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="auditseal",
            name="first_event_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="auditseal",
            name="last_event_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="AuditSealActionEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True,
                        primary_key=True,
                        serialize=False,
                        verbose_name="ID",
                    ),
                ),
                ("operator_action_id", models.BigIntegerField()),
                ("row_digest", models.CharField(max_length=64)),
                (
                    "seal",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="action_entries",
                        to="audit.auditseal",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["seal", "operator_action_id"],
                        name="audit_sealaction_seal_idx",
                    )
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("operator_action_id",),
                        name="audit_sealaction_action_uniq",
                    )
                ],
            },
        ),
        migrations.RunPython(legacy_chain_rekey, legacy_chain_unkey),
    ]
