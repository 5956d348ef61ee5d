"""Document revisions enter the verifiable log.

Rows inserted from now on carry the transaction that inserted them (``log_ticket``, set by
the database: ``core.models.TransactionTicket``), which the verifiable log's sealer walks to
take every row, whatever its id, without writing to it again (docs/subsystems/log.md, "The
verifiable log"). Rows already there keep NULL and are taken by id."""

from django.db import migrations

from core.log_ticket_migrations import log_ticket_operations


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0001_initial"),
    ]

    operations = [
        *log_ticket_operations(
            "documentrevision", "research_documentrevision", "research_revision"
        ),
    ]
