import json
import time
import urllib.error
import urllib.request
import uuid

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from webhooks.models import SignatureScheme
from webhooks.schemes import signature_headers


def sample_research_event(*, event_id: str) -> dict:
    now = timezone.now().isoformat().replace("+00:00", "Z")
    return {
        "event_id": event_id,
        "event_type": "research.document.updated",
        "occurred_at": now,
        "delivered_at": now,
        "delivery_attempt": 1,
        "producer": "send_test_webhook",
        "entity": {
            "entity_id": "doc-demo-1",
            "entity_type": "research_document",
            "source_version": int(time.time()),
        },
        "source": {
            "url": "https://example.org/papers/demo-1",
            "title": "A demo research document",
            "content_hash": "sha256:" + uuid.uuid4().hex,
            "published_at": "2026-01-15T09:00:00Z",
        },
        "data": {
            "summary": "Sent by send_test_webhook.",
            "authors": ["A. Researcher"],
            "citations": [
                {"text": "Example", "reference_url": "https://example.org/ref/1"}
            ],
        },
    }


class Command(BaseCommand):
    help = "Sign a sample research event and POST it to /webhooks/<source>/; print the answer."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--source", required=True, help="the source's slug")
        parser.add_argument("--secret", required=True)
        parser.add_argument(
            "--scheme",
            choices=SignatureScheme.values,
            default=SignatureScheme.HMAC_SHA256,
        )
        parser.add_argument("--event-id", help="default: a new evt_<uuid>")

    def handle(self, *args, url, source, secret, scheme, event_id, **options):
        event_id = event_id or f"evt_{uuid.uuid4().hex}"
        raw_body = json.dumps(sample_research_event(event_id=event_id)).encode()
        headers = signature_headers(
            scheme=scheme,
            secret=secret,
            raw_body=raw_body,
            event_id=event_id,
            timestamp=int(time.time()),
        )
        if scheme == SignatureScheme.GITHUB:
            headers["X-GitHub-Event"] = "research.document.updated"
        headers["Content-Type"] = "application/json"
        target = f"{url.rstrip('/')}/webhooks/{source}/"
        # Only the operator's own --url is opened (http or https).
        if not target.startswith(("http://", "https://")):
            raise CommandError("--url must start with http:// or https://")
        request = urllib.request.Request(  # noqa: S310
            target, data=raw_body, headers=headers, method="POST"
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
