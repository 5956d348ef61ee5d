"""Retention's new action: a day of the inbox dropped with its partitions."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("trail", "0003_ops_api_actions"),
    ]

    operations = [
        migrations.AlterField(
            model_name="operatoraction",
            name="action",
            field=models.CharField(
                choices=[
                    ("replay", "Replay"),
                    ("bulk_replay", "Bulk Replay"),
                    ("mark_investigated", "Mark Investigated"),
                    ("rotate_secret", "Rotate Secret"),
                    ("rotate_public_key", "Rotate Public Key"),
                    ("purge_bodies", "Purge Bodies"),
                    ("start_bulk_replay", "Start Bulk Replay"),
                    ("cancel_bulk_replay", "Cancel Bulk Replay"),
                    ("resume_bulk_replay", "Resume Bulk Replay"),
                    ("pause_source", "Pause Source"),
                    ("resume_source", "Resume Source"),
                    ("create_source", "Create Source"),
                    ("enable_source", "Enable Source"),
                    ("disable_source", "Disable Source"),
                    ("set_expected_interval", "Set Expected Interval"),
                    ("purge_evidence_bodies", "Purge Evidence Bodies"),
                    ("purge_signature_failures", "Purge Signature Failures"),
                    ("create_api_client", "Create Api Client"),
                    ("activate_api_client", "Activate Api Client"),
                    ("deactivate_api_client", "Deactivate Api Client"),
                    ("set_source_client", "Set Source Client"),
                    ("create_deploy_target", "Create Deploy Target"),
                    ("change_deploy_target", "Change Deploy Target"),
                    ("test_deploy_target", "Test Deploy Target"),
                    ("switch_dependency", "Switch Dependency"),
                    ("set_deploy_target_breaker", "Set Deploy Target Breaker"),
                    ("set_api_client_role", "Set Api Client Role"),
                    ("pause_bulk_replay", "Pause Bulk Replay"),
                    ("revoke_previous_secrets", "Revoke Previous Secrets"),
                    ("evict_idempotency_key", "Evict Idempotency Key"),
                    ("drop_inbox_partition", "Drop Inbox Partition"),
                ],
                max_length=32,
            ),
        ),
    ]
