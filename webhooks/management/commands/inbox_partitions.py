from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from core.actors import Actor
from webhooks.ledger import KEY_PURGE_BATCH, inbox_keys_purge
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
        "OS user; with --purge-keys, then deletes the deduplication ledger's keys past "
        "INBOX_DEDUP_DAYS whose rows have left, as that work does last (on SQLite too)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--ensure", action="store_true")
        parser.add_argument("--retire", action="store_true")
        parser.add_argument("--purge-keys", action="store_true")
        parser.add_argument("--batch-size", type=int, default=KEY_PURGE_BATCH)

    def handle(
        self,
        *args,
        ensure: bool,
        retire: bool,
        purge_keys: bool,
        batch_size: int,
        **options,
    ):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        if connection.vendor != "postgresql":
            if purge_keys:
                self._keys_purge(batch_size)
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
        if purge_keys:
            self._keys_purge(batch_size)
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

    def _keys_purge(self, batch_size: int) -> None:
        purged = inbox_keys_purge(batch_size=batch_size)
        self.stdout.write(
            f"purged {purged.deleted} keys received before"
            f" {purged.received_before.isoformat()} in {purged.batches} batches"
        )
