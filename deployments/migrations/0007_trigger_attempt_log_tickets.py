"""Trigger attempts enter the verifiable log (once closed): rows inserted from now on carry
the transaction that inserted them (``log_ticket``); rows already there keep NULL and are
taken by id (docs/subsystems/log.md, "The verifiable log")."""

from django.db import migrations

from core.log_ticket_migrations import log_ticket_operations


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0006_trigger_attempts_and_deploy_targets"),
    ]

    operations = [
        *log_ticket_operations(
            "triggerattempt", "deployments_triggerattempt", "deployments_trig"
        ),
    ]
