from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from core.actors import Actor
from core.cli import secret_option_read
from core.errors import InvalidPayload
from core.models import ApiClient, ApiRole
from trail.api_clients import api_client_create, api_client_set_role


class Command(BaseCommand):
    help = (
        "Manage API clients. `create NAME [--token T | --token-file PATH]` prints the token "
        "once, as the last line. Recorded as an operator "
        "action under the invoking OS user."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create an API client")
        create.add_argument("name")
        create.add_argument(
            "--token",
            help="use this token instead of a generated one (it stays in the shell's "
            "history: prefer --token-file)",
        )
        create.add_argument(
            "--token-file",
            metavar="PATH",
            help="read the token from this file, or from standard input with -",
        )
        create.add_argument(
            "--role",
            choices=ApiRole.values,
            default=ApiRole.CI,
            help="what the client may do (default: ci, what every client could do "
            "before roles)",
        )
        set_role = sub.add_parser("set-role", help="change an API client's role")
        set_role.add_argument("name")
        set_role.add_argument("role", choices=ApiRole.values)

    def handle(self, *args, action, **options):
        if action == "create":
            token = secret_option_read(
                options.get("token"), options.get("token_file"), name="token"
            )
            if token is not None and not token.strip():
                raise CommandError("the token must not be empty")
            if token is not None and len(token) < 32:
                # Accepted (scripts and tests choose their own), but say it is guessable.
                self.stderr.write("warning: a token shorter than 32 characters is weak")
            try:
                client, token = api_client_create(
                    name=options["name"],
                    token=token,
                    actor=Actor.command(),
                    role=options["role"],
                )
            except IntegrityError as exc:
                raise CommandError(
                    "an API client with that name or token already exists"
                ) from exc
            except InvalidPayload as exc:
                raise CommandError(f"--token: {exc}") from None
            self.stdout.write(
                f"created API client {client.name!r} (id {client.pk}, role "
                f"{client.role})"
            )
            self.stdout.write("token (shown once, store it now):")
            self.stdout.write(token)
        elif action == "set-role":
            found = ApiClient.objects.filter(name=options["name"]).first()
            if found is None:
                raise CommandError(f"no API client {options['name']!r}")
            changed = api_client_set_role(
                client=found, role=options["role"], actor=Actor.command()
            )
            self.stdout.write(
                f"API client {found.name!r} is {found.role}"
                + ("" if changed else " (unchanged)")
            )
