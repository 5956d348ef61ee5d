from django.core.management.base import BaseCommand
from django.db import connection

from core.actors import Actor
from webhooks.partitions import (
    TABLES,
    inbox_partitions_ensure,
    inbox_partitions_retire,
    partitions,
    partitions_ahead_days,
)


class Command(BaseCommand):
    help = (
        "Lists the time partitions of the inbox and of its attempts (PostgreSQL) and how "
        "far ahead they reach; with --ensure, first creates those missing up to "
        "INBOX_PARTITIONS_AHEAD_DAYS ahead, as the hourly periodic work does (idempotent, "
        "safe beside it); with --retire, drops the days past INBOX_RETENTION_DAYS that "
        "nothing holds, as that work does too, each an operator action of the invoking "
        "OS user."
    )

    def add_arguments(self, parser):
        parser.add_argument("--ensure", action="store_true")
        parser.add_argument("--retire", action="store_true")

    def handle(self, *args, ensure: bool, retire: bool, **options):
        if connection.vendor != "postgresql":
            self.stdout.write(
                "not partitioned: the embedded database keeps one table each"
            )
            return
        if ensure:
            for name in inbox_partitions_ensure():
                self.stdout.write(f"created {name}")
        if retire:
            retired = inbox_partitions_retire(actor=Actor.command())
            for name in retired.dropped:
                self.stdout.write(f"dropped {name}")
            for name, reasons in retired.held.items():
                self.stdout.write(f"held {name}: {', '.join(reasons)}")
        for table in TABLES:
            found = partitions(table)
            ahead = partitions_ahead_days(table)
            self.stdout.write(
                f"{table.table}: {len(found)} partitions, {ahead:.1f} days ahead"
            )
            for partition in found:
                start = partition.start.isoformat() if partition.start else "MINVALUE"
                self.stdout.write(
                    f"  {partition.name}  {start} .. {partition.end.isoformat()}"
                )
