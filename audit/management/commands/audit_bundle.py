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
        "JSON object that `python -m audit.verify_bundle FILE --key KEY` checks offline."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("subject", choices=SUBJECTS)
        parser.add_argument("id", help="the record's id (see above)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            pk = subject_resolve(subject=options["subject"], identifier=options["id"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        bundle = evidence_bundle(subject=options["subject"], pk=pk)
        self.stdout.write(json.dumps(bundle, indent=2))
