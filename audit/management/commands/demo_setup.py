from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from audit.roles import AUDITORS, OPERATORS, roles_bootstrap
from core.actors import Actor
from core.models import ApiClient, token_hash
from demo.services import SEARCH_INDEX, demo_dependency_ensure
from trail.api_clients import api_client_create
from webhooks.models import WebhookSource
from webhooks.sources import webhook_source_create

DEMO_ADMIN = ("admin", "admin")
DEMO_API_TOKEN = "demo-api-token-change-me"  # noqa: S105 - a published demo credential
DEMO_WEBHOOK_SECRET = "demo-webhook-secret-change-me"  # noqa: S105 - published, like the token
DEMO_OPERATOR = ("operator", "operator")
# The source of the console's rehearsal (docs/console.md, "A rehearsal"): the research
# documents behind the demo's search index, which an operator switches down and back up.
DEMO_REHEARSAL_SOURCE = "demo-indexed"
DEMO_AUDITOR = ("auditor", "auditor")


class Command(BaseCommand):
    help = (
        "Create the demo data of the embedded default (idempotent): an admin user and an API "
        "client with published credentials, the demo webhook sources and the demo's search "
        "index (up). Refuses to run with DEBUG off."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--force", action="store_true", help="run even with DEBUG off"
        )

    def handle(self, *args, force, **options):
        if not settings.DEBUG and not force:
            raise CommandError(
                "demo_setup creates known credentials; it runs only with DEBUG"
            )
        user_model = get_user_model()
        username, password = DEMO_ADMIN
        if not user_model.objects.filter(username=username).exists():
            user_model.objects.create_superuser(username, "admin@example.com", password)
        if not ApiClient.objects.filter(token_hash=token_hash(DEMO_API_TOKEN)).exists():
            api_client_create(name="demo", token=DEMO_API_TOKEN, actor=Actor.system())
        self.stdout.write(
            f"demo admin: http://127.0.0.1:8000/admin/ user {username!r} password {password!r}"
        )
        self.stdout.write(f"demo API token: {DEMO_API_TOKEN}")
        self._demo_webhook_source()
        self._demo_rehearsal()
        self._demo_roles(user_model)

    def _demo_webhook_source(self):
        if not WebhookSource.objects.filter(slug="demo").exists():
            webhook_source_create(
                slug="demo",
                scheme="hmac-sha256",
                handler="research",
                secret=DEMO_WEBHOOK_SECRET,
                actor=Actor.system(),
            )
        self.stdout.write(
            "demo webhook source: http://127.0.0.1:8000/webhooks/demo/ (hmac-sha256, "
            f"research) secret {DEMO_WEBHOOK_SECRET}"
        )

    def _demo_rehearsal(self):
        """The rehearsal's source and the dependency its events need, when the settings
        register the demo integration (the local ones do)."""
        if "demo" not in settings.WEBHOOK_INTEGRATIONS:
            return
        demo_dependency_ensure(
            name=SEARCH_INDEX,
            description="The demo integration indexes each document for search.",
        )
        if not WebhookSource.objects.filter(slug=DEMO_REHEARSAL_SOURCE).exists():
            webhook_source_create(
                slug=DEMO_REHEARSAL_SOURCE,
                scheme="hmac-sha256",
                handler="demo",
                secret=DEMO_WEBHOOK_SECRET,
                actor=Actor.system(),
            )
        self.stdout.write(
            f"demo rehearsal source: http://127.0.0.1:8000/webhooks/"
            f"{DEMO_REHEARSAL_SOURCE}/ (hmac-sha256, demo: needs the demo's "
            f"{SEARCH_INDEX}) secret {DEMO_WEBHOOK_SECRET}"
        )

    def _demo_roles(self, user_model):
        """The audit console's roles and one demo user in each."""
        from django.contrib.auth.models import Group

        roles_bootstrap()
        for (username, password), group in (
            (DEMO_OPERATOR, OPERATORS),
            (DEMO_AUDITOR, AUDITORS),
        ):
            if not user_model.objects.filter(username=username).exists():
                user = user_model.objects.create_user(
                    username, f"{username}@example.com", password, is_staff=True
                )
                user.groups.add(Group.objects.get(name=group))
            self.stdout.write(
                f"demo {group[:-1].lower()}: user {username!r} password {password!r}"
            )
