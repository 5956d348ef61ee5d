import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.stories import SUBJECTS, evidence_bundle, subject_resolve
from core.errors import NotFound


class Command(BaseCommand):
    help = (
        "Print the evidence bundle of a research document (its entity id), an inbox event "
        "(its id, or SOURCE/EVENT_ID) or a deployment (its dep_ id): every entry of its "
        "story with its inclusion proof, the raw bodies and the signed checkpoint, as one "
        "JSON object that `python -m audit.verify_bundle FILE --key KEY` checks offline. "
        "A long story keeps the first and the latest records of each kind and names the "
        'others under "omitted".'
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("subject", choices=SUBJECTS)
        parser.add_argument("id", help="the record's id (see above)")
        parser.add_argument(
            "--entries-per-kind",
            type=int,
            metavar="N",
            help="tell at most N records of each kind, the first and the latest half "
            "(default AUDIT_BUNDLE_ENTRIES_PER_KIND; at least 2)",
        )
        parser.add_argument(
            "--body-bytes",
            type=int,
            metavar="BYTES",
            help="carry at most BYTES of raw bodies (default AUDIT_BUNDLE_BODY_BYTES)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            pk = subject_resolve(subject=options["subject"], identifier=options["id"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        per_kind, body_bytes = options["entries_per_kind"], options["body_bytes"]
        if per_kind is not None and per_kind < 2:
            raise CommandError("--entries-per-kind must be at least 2")
        if body_bytes is not None and body_bytes < 0:
            raise CommandError("--body-bytes must be at least 0")
        bundle = evidence_bundle(
            subject=options["subject"],
            pk=pk,
            entries_per_kind=per_kind,
            body_bytes=body_bytes,
        )
        self.stdout.write(json.dumps(bundle, indent=2))
