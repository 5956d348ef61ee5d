"""Deployments and builds (their creation: key, repository, commit), their transitions and the
status syncs enter the verifiable log.

Rows inserted from now on carry the transaction that inserted them (``log_ticket``, set by
the database: ``core.models.TransactionTicket``), which the verifiable log's sealer walks to
take every row, whatever its id, without writing to it again (docs/subsystems/log.md, "The
verifiable log"). Rows already there keep NULL and are taken by id."""

from django.db import migrations

from core.log_ticket_migrations import log_ticket_operations


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0004_jobs_client_id_indexes"),
    ]

    operations = [
        *log_ticket_operations(
            "deployment", "deployments_deployment", "deployments_dep"
        ),
        *log_ticket_operations("build", "deployments_build", "deployments_bld"),
        *log_ticket_operations(
            "jobtransition", "deployments_jobtransition", "deployments_trans"
        ),
        *log_ticket_operations(
            "statussync", "deployments_statussync", "deployments_sync"
        ),
    ]
