from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from core.services import api_client_create


class Command(BaseCommand):
    help = "Manage API clients. `create NAME [--token T]` prints the token once, as the last line."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create an API client")
        create.add_argument("name")
        create.add_argument("--token", help="use this token instead of a generated one")

    def handle(self, *args, action, **options):
        if action == "create":
            token = options.get("token")
            if token is not None and not token.strip():
                raise CommandError("the token must not be empty")
            if token is not None and len(token) < 32:
                # Accepted (scripts and tests choose their own), but say it is guessable.
                self.stderr.write("warning: a token shorter than 32 characters is weak")
            try:
                client, token = api_client_create(name=options["name"], token=token)
            except IntegrityError as exc:
                raise CommandError(
                    "an API client with that name or token already exists"
                ) from exc
            self.stdout.write(f"created API client {client.name!r} (id {client.pk})")
            self.stdout.write("token (shown once, store it now):")
            self.stdout.write(token)
