from django.core.management.base import BaseCommand
from django.db import connection

from webhooks.partitions import (
    TABLES,
    inbox_partitions_ensure,
    partitions,
    partitions_ahead_days,
)


class Command(BaseCommand):
    help = (
        "Lists the time partitions of the inbox and of its attempts (PostgreSQL) and how "
        "far ahead they reach; with --ensure, first creates those missing up to "
        "INBOX_PARTITIONS_AHEAD_DAYS ahead, as the hourly periodic work does (idempotent, "
        "safe beside it)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--ensure", action="store_true")

    def handle(self, *args, ensure: bool, **options):
        if connection.vendor != "postgresql":
            self.stdout.write(
                "not partitioned: the embedded database keeps one table each"
            )
            return
        if ensure:
            for name in inbox_partitions_ensure():
                self.stdout.write(f"created {name}")
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
