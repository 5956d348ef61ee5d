import argparse

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from core.actors import Actor
from core.cli import secret_option_read
from core.errors import InvalidPayload, ServiceError
from core.models import ApiClient
from webhooks.errors import SourceAlreadyPaused
from webhooks.integrations import integration_names
from webhooks.models import WebhookSource
from webhooks.pacing import RATE_PROMISE
from webhooks.pausing import webhook_source_pause, webhook_source_resume
from webhooks.schemes import DEFAULT_SCHEME, scheme_names, secret_fingerprint
from webhooks.selectors import webhook_source_list, webhook_source_public_keys
from webhooks.sources import (
    DEFAULT_GRACE_SECONDS,
    MAX_GRACE_SECONDS,
    webhook_source_create,
    webhook_source_rotate,
    webhook_source_set_enabled,
)


def _rate(text: str) -> float:
    """``--rate``: a number of events per second above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1e9:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text!r}")
    return value


def _secret_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--secret",
        help=(
            "use this secret instead of a generated one (it stays in the shell's "
            "history: prefer --secret-file)"
        ),
    )
    parser.add_argument(
        "--secret-file",
        metavar="PATH",
        help="read the secret from this file, or from standard input with -",
    )


def _public_key_argument(parser: argparse.ArgumentParser, *, help: str) -> None:
    parser.add_argument("--public-key", metavar="whpk_...", help=help)


def _reason(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


class Command(BaseCommand):
    help = (
        "Manage webhook sources: create | rotate | list | disable | enable | pause | resume. "
        "A generated secret is printed once, as the last line; no command ever shows a "
        "stored secret. A standard-webhooks source whose producer signs with Ed25519 (v1a) "
        "holds its public key instead (--public-key whpk_...)."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="create a source")
        create.add_argument("slug")
        create.add_argument("--scheme", choices=scheme_names(), default=DEFAULT_SCHEME)
        create.add_argument("--handler", choices=integration_names(), required=True)
        _secret_arguments(create)
        _public_key_argument(
            create,
            help="standard-webhooks: the producer signs v1a entries with its Ed25519 "
            "private key, the source holds this public key (whpk_ + base64 of its 32 "
            "bytes) and no secret",
        )
        create.add_argument(
            "--client",
            help="a GitHub source: the API client whose deployments its statuses may "
            "move (default: any client's)",
        )
        rotate = sub.add_parser(
            "rotate", help="add a new secret; the old one stays valid"
        )
        rotate.add_argument("slug")
        _secret_arguments(rotate)
        _public_key_argument(
            rotate,
            help="a source that holds its producer's public key: the new public key "
            "(whpk_...); the previous ones stay valid for the grace period",
        )
        rotate.add_argument(
            "--grace-seconds",
            type=int,
            default=DEFAULT_GRACE_SECONDS,
            help=(
                "how long the previous secrets stay valid (default 86400, at most "
                f"{MAX_GRACE_SECONDS}: 30 days)"
            ),
        )
        rotate.add_argument(
            "--reason",
            default="webhook_source rotate",
            help="recorded with the operator action",
        )
        sub.add_parser("list", help="list sources (never secrets)")
        for action in ("disable", "enable"):
            toggle = sub.add_parser(action, help=f"{action} a source")
            toggle.add_argument("slug")
            toggle.add_argument(
                "--reason",
                default=f"webhook_source {action}",
                help="recorded with the operator action",
            )
        pause = sub.add_parser(
            "pause",
            help="hold a source's events: deliveries are still verified and stored",
        )
        pause.add_argument("slug")
        pause.add_argument(
            "--reason",
            type=_reason,
            required=True,
            help="why (recorded with the operator action)",
        )
        resume = sub.add_parser(
            "resume", help="drain a paused source's held events in order"
        )
        resume.add_argument("slug")
        resume.add_argument(
            "--rate",
            type=_rate,
            default=None,
            help=f"{RATE_PROMISE} (default: as fast as the relay goes)",
        )

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except InvalidPayload as exc:
            raise CommandError(f"invalid: {exc}: {exc.details}") from exc

    def _source(self, slug: str) -> WebhookSource:
        source = WebhookSource.objects.filter(slug=slug).first()
        if source is None:
            raise CommandError(f"no webhook source {slug!r}")
        return source

    def _create(
        self,
        *,
        slug,
        scheme,
        handler,
        secret,
        secret_file,
        client=None,
        public_key=None,
        **options,
    ):
        secret = secret_option_read(secret, secret_file, name="secret")
        if public_key is not None and secret is not None:
            raise CommandError(
                "give --public-key or a secret, not both: a source holds one kind"
            )
        generated = secret is None and public_key is None
        api_client = None
        if client is not None:
            api_client = ApiClient.objects.filter(name=client).first()
            if api_client is None:
                raise CommandError(f"no API client {client!r}")
        try:
            source, secret = webhook_source_create(
                slug=slug,
                scheme=scheme,
                handler=handler,
                secret=secret,
                actor=Actor.command(),
                client=api_client,
                public_key=public_key,
            )
        except IntegrityError as exc:
            raise CommandError(f"a webhook source {slug!r} already exists") from exc
        except ValidationError as exc:
            raise CommandError(f"invalid: {exc.message_dict}") from exc
        bound = f", client {api_client.name}" if api_client else ""
        self.stdout.write(
            f"created webhook source {source.slug!r} "
            f"(scheme {source.scheme}, handler {source.handler}{bound})"
        )
        if public_key is not None:
            # ``secret`` is the public key as stored: not a secret, shown as any list does.
            self.stdout.write(
                f"verifies v1a signatures with {secret} "
                f"(fingerprint {secret_fingerprint(secret)})"
            )
        elif generated:
            self.stdout.write("secret (shown once, store it now):")
            self.stdout.write(secret)

    def _rotate(
        self,
        *,
        slug,
        secret,
        secret_file,
        grace_seconds,
        reason,
        public_key=None,
        **options,
    ):
        if not 0 <= grace_seconds <= MAX_GRACE_SECONDS:
            raise CommandError(
                f"--grace-seconds: the grace period is 0 to {MAX_GRACE_SECONDS} seconds "
                "(30 days)"
            )
        secret = secret_option_read(secret, secret_file, name="secret")
        if public_key is not None and secret is not None:
            raise CommandError(
                "give --public-key or a secret, not both: a source holds one kind"
            )
        generated = secret is None and public_key is None
        # Recorded as an operator action under the invoking OS user, as replay_events is.
        secret = webhook_source_rotate(
            source=self._source(slug),
            secret=secret,
            public_key=public_key,
            grace_seconds=grace_seconds,
            actor=Actor.command(),
            reason=reason,
        )
        previous = "public keys" if public_key is not None else "secrets"
        self.stdout.write(
            f"rotated webhook source {slug!r}: previous {previous} stay valid for "
            f"{grace_seconds} s"
        )
        if public_key is not None:
            self.stdout.write(
                f"verifies v1a signatures with {secret} "
                f"(fingerprint {secret_fingerprint(secret)})"
            )
        elif generated:
            self.stdout.write("new secret (shown once, store it now):")
            self.stdout.write(secret)

    def _list(self, **options):
        self.stdout.write(
            "slug\tscheme\thandler\tsecrets\tenabled\tpaused\tpublic keys"
        )
        sources = list(webhook_source_list())
        # Public keys are not secrets: the ones that verify now are shown, as the admin
        # shows them, with the fingerprint an inbox row records.
        public_keys = webhook_source_public_keys(
            source_ids=[s.pk for s in sources if s.public_key_count], valid_only=True
        )
        for source in sources:
            keys = ", ".join(
                f"{key.public_key} ({key.fingerprint})"
                for key in public_keys.get(source.pk, [])
            )
            self.stdout.write(
                f"{source.slug}\t{source.scheme}\t{source.handler}\t"
                f"{source.secret_count}\t{'yes' if source.is_enabled else 'no'}\t"
                f"{self._pause_state(source)}\t{keys or '-'}"
            )

    @staticmethod
    def _pause_state(source: WebhookSource) -> str:
        hold = source.current_hold
        if hold is None:
            return "no"
        if hold.paused_at is not None:
            reason = " ".join(hold.pause_reason.split())
            return (
                f"yes since {hold.paused_at.isoformat(timespec='seconds')} "
                f"by {hold.paused_by_name}: {reason}"
            )
        rate = f"{hold.drain_rate:g}/s" if hold.drain_rate else "no limit"
        return f"no (draining held events, {rate})"

    def _disable(self, *, slug, reason, **options):
        # Returns once every web process answers 404 for it.
        changed = webhook_source_set_enabled(
            source=self._source(slug),
            enabled=False,
            actor=Actor.command(),
            reason=reason,
        )
        state = "disabled" if changed else "already disabled:"
        self.stdout.write(f"{state} webhook source {slug!r}")

    def _enable(self, *, slug, reason, **options):
        changed = webhook_source_set_enabled(
            source=self._source(slug),
            enabled=True,
            actor=Actor.command(),
            reason=reason,
        )
        state = "enabled" if changed else "already enabled:"
        self.stdout.write(f"{state} webhook source {slug!r}")

    def _pause(self, *, slug, reason, **options):
        source = self._source(slug)
        try:
            action = webhook_source_pause(
                source=source, reason=reason, actor=Actor.command()
            )
        except SourceAlreadyPaused as exc:
            raise CommandError(f"not paused again: {exc}") from exc
        held = action.details["held_events"]
        more = "+" if action.details["held_events_capped"] else ""
        self.stdout.write(
            f"paused webhook source {slug!r}: deliveries are still accepted, "
            f"their events wait ({held}{more} waiting now)"
        )

    def _resume(self, *, slug, rate, **options):
        source = self._source(slug)
        try:
            action = webhook_source_resume(
                source=source, rate=rate, actor=Actor.command()
            )
        except ServiceError as exc:  # not paused, or a rate it refuses
            raise CommandError(f"not resumed: {exc}") from exc
        held = action.details["held_events"]
        more = "+" if action.details["held_events_capped"] else ""
        pace = f"at most {rate:g} events/s" if rate else "as fast as the relay goes"
        self.stdout.write(
            f"resumed webhook source {slug!r}: {held}{more} held event(s) drain in "
            f"order, {pace}"
        )
