import time
import urllib.error
import urllib.request
import uuid

from django.core.management.base import BaseCommand, CommandError

from webhooks.integrations import integration_get
from webhooks.models import WebhookSource
from webhooks.schemes import scheme_get, scheme_names


class Command(BaseCommand):
    help = (
        "Sign a sample event of the source's integration and POST it to /webhooks/<source>/; "
        "print the answer."
    )

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--source", required=True, help="the source's slug")
        parser.add_argument("--secret", required=True)
        parser.add_argument(
            "--scheme",
            choices=scheme_names(),
            help="default: the source's own (read from the database)",
        )
        parser.add_argument(
            "--handler",
            help="the integration whose sample is sent (default: the source's own, "
            "else research)",
        )
        parser.add_argument("--event-id", help="default: a new evt_<uuid>")

    def handle(self, *args, url, source, secret, scheme, handler, event_id, **options):
        scheme, handler = self._source_defaults(source, scheme, handler)
        sample = integration_get(handler).sample(
            event_id=event_id or f"evt_{uuid.uuid4().hex}"
        )
        headers = scheme_get(scheme).sign(
            raw_body=sample.raw_body,
            secret=secret,
            event_id=sample.event_id,
            timestamp=int(time.time()),
        )
        headers.update(sample.headers)
        headers["Content-Type"] = "application/json"
        target = f"{url.rstrip('/')}/webhooks/{source}/"
        # Only the operator's own --url is opened (http or https).
        if not target.startswith(("http://", "https://")):
            raise CommandError("--url must start with http:// or https://")
        request = urllib.request.Request(  # noqa: S310
            target, data=sample.raw_body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode(errors="replace")
        except OSError as exc:
            raise CommandError(f"POST {target} failed: {exc}") from exc
        self.stdout.write(f"POST {target} -> {status}")
        self.stdout.write(text)

    def _source_defaults(
        self, slug: str, scheme: str | None, handler: str | None
    ) -> tuple[str, str]:
        """The source's own scheme and integration when this database knows it (the command
        may also point at another server's source, with ``--scheme`` and ``--handler``)."""
        if scheme and handler:
            return scheme, handler
        try:
            source = WebhookSource.objects.filter(slug=slug).first()
        except Exception:  # no database here: the flags or the defaults decide
            source = None
        scheme = scheme or (source.scheme if source else "hmac-sha256")
        handler = handler or (source.handler if source else "research")
        return scheme, handler
