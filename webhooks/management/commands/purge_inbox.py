from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from core.actors import Actor
from webhooks.retention import (
    evidence_bodies_purge,
    inbox_bodies_purge,
    signature_failures_purge,
)


class Command(BaseCommand):
    help = (
        "Drops the raw bodies of terminal inbox events older than DAYS, in batches, and the "
        "bodies of evidence of conflicting deliveries last seen before then; keeps their "
        "metadata (ids, hashes, fingerprints, statuses, counts), so deduplication still "
        "works; deletes the signature-failure counters of before then. Each batch is "
        "recorded as an operator action under the invoking OS user."
    )

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=int, required=True, metavar="DAYS")
        parser.add_argument("--batch-size", type=int, default=1000)

    def handle(self, *args, older_than: int, batch_size: int, **options):
        if older_than < 0:
            raise CommandError("--older-than must be 0 or more days")
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        cutoff = timezone.now() - timedelta(days=older_than)

        def progress(count: int) -> None:
            self.stdout.write(f"purged {count} bodies so far")

        actor = Actor.command()
        total = inbox_bodies_purge(
            older_than=cutoff, batch_size=batch_size, actor=actor, progress=progress
        )
        evidence = evidence_bodies_purge(
            older_than=cutoff, batch_size=batch_size, actor=actor
        )
        counters = signature_failures_purge(older_than=cutoff, actor=actor)
        self.stdout.write(
            self.style.SUCCESS(
                f"Purged the raw bodies of {total} terminal events received before "
                f"{cutoff.isoformat()}, the bodies of {evidence} conflicting deliveries "
                f"last seen before it, and {counters} signature-failure counters"
            )
        )
