import time
import urllib.error
import urllib.request
import uuid

from django.core.management.base import BaseCommand, CommandError

from core.cli import secret_option_read
from core.errors import InvalidPayload
from webhooks.integrations import integration_get
from webhooks.models import WebhookSource
from webhooks.schemes import PRIVATE_KEY_PREFIX, scheme_get, scheme_names


class Command(BaseCommand):
    help = (
        "Sign a sample event of the source's integration and POST it to /webhooks/<source>/; "
        "print the answer. --secret signs as the source's secret does, --private-key-file "
        "(whsk_...) a v1a entry for a source that holds the producer's public key."
    )

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--source", required=True, help="the source's slug")
        signing = parser.add_mutually_exclusive_group(required=True)
        signing.add_argument("--secret")
        signing.add_argument(
            "--private-key-file",
            metavar="PATH",
            help="standard-webhooks: sign a v1a entry with the Ed25519 private key "
            "(whsk_...) on this file's first line (- reads standard input), as a "
            "producer whose source holds its public key does",
        )
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

    def handle(
        self,
        *args,
        url,
        source,
        secret,
        private_key_file,
        scheme,
        handler,
        event_id,
        **options,
    ):
        if private_key_file is not None:
            secret = self._private_key_read(private_key_file)
        scheme, handler = self._source_defaults(
            source, scheme, handler, private_key=private_key_file is not None
        )
        if private_key_file is not None and not hasattr(
            scheme_get(scheme), "public_key_validate"
        ):
            raise CommandError(
                f"a private key signs standard-webhooks deliveries (v1a), not {scheme}"
            )
        sample = integration_get(handler).sample(
            event_id=event_id or f"evt_{uuid.uuid4().hex}"
        )
        try:
            headers = scheme_get(scheme).sign(
                raw_body=sample.raw_body,
                secret=secret,
                event_id=sample.event_id,
                timestamp=int(time.time()),
            )
        except InvalidPayload as exc:
            raise CommandError(f"not signed: {exc}") from exc
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

    @staticmethod
    def _private_key_read(path: str) -> str:
        """The ``whsk_`` key on the file's first line (``-``: standard input)."""
        private_key = secret_option_read(None, path, name="private-key") or ""
        if not private_key.startswith(PRIVATE_KEY_PREFIX):
            raise CommandError(
                "--private-key-file: no whsk_ private key on its first line (whsk_ + "
                "base64 of the 32-byte Ed25519 private key, as webhook_keygen prints it)"
            )
        return private_key

    def _source_defaults(
        self,
        slug: str,
        scheme: str | None,
        handler: str | None,
        *,
        private_key: bool = False,
    ) -> tuple[str, str]:
        """The source's own scheme and integration when this database knows it (the command
        may also point at another server's source, with ``--scheme`` and ``--handler``).
        Signing with a private key, the scheme is ``standard-webhooks`` unless given."""
        if scheme and handler:
            return scheme, handler
        try:
            source = WebhookSource.objects.filter(slug=slug).first()
        except Exception:  # no database here: the flags or the defaults decide
            source = None
        default_scheme = "standard-webhooks" if private_key else "hmac-sha256"
        scheme = scheme or (source.scheme if source else default_scheme)
        handler = handler or (source.handler if source else "research")
        return scheme, handler
