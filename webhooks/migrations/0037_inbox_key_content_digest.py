"""The deduplication ledger's content fingerprint as the 32 bytes of its SHA-256, not its 64 hex
characters: 26 bytes fewer a key (docs/scaling.md, "What the ledger holds").

Two statements that change no stored key and take their table's lock only for a moment (a
nullable column without a default, and a constraint dropped): nothing is rewritten. Keys written
before keep their fingerprint as hex text (``content_fingerprint``, from now on nullable) and are
read the same way (``InboxKey.fingerprint``, the record statement's conflict condition) until the
ledger's horizon takes them; keys written from now on hold ``content_digest`` alone."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0036_field_indexes_led_by_others"),
    ]

    operations = [
        migrations.AddField(
            model_name="inboxkey",
            name="content_digest",
            field=models.BinaryField(max_length=32, null=True),
        ),
        migrations.AlterField(
            model_name="inboxkey",
            name="content_fingerprint",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
    ]
