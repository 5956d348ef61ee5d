from django.core.management.base import BaseCommand, CommandError

from audit.note import NoteError, key_generate


class Command(BaseCommand):
    help = (
        "Make a new Ed25519 signing key for the verifiable log's checkpoints. NAME is the "
        "log's origin (a schema-less URL such as inbox.example.com/audit-log). Prints the "
        "verifier key (public: GET /audit/public-key serves it) and, once, as the last line, "
        "the signing key to set as AUDIT_SIGNING_KEY (secret: keep it out of the database "
        "and its backups)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="the key's name, which is the log's origin")

    def handle(self, *args, name, **options):
        try:
            skey, vkey = key_generate(name)
        except NoteError as exc:
            raise CommandError(f"{exc}") from None
        self.stdout.write(f"verifier key: {vkey}")
        self.stdout.write(f"AUDIT_LOG_ORIGIN={name} (the default: the key's name)")
        self.stdout.write(skey)
