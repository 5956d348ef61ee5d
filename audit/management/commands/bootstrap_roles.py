from django.core.management.base import BaseCommand

from audit.roles import roles_bootstrap


class Command(BaseCommand):
    help = (
        "Create or update (idempotently) the groups Operators and Auditors with the permissions "
        "of the installed models. Run it again after new models were added."
    )

    def handle(self, *args, **options):
        for name, count in roles_bootstrap().items():
            self.stdout.write(f"{name}: {count} permissions")
