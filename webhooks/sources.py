"""Sources and their secrets (or their producers' public keys): create, rotate, enable and
disable, the expected delivery interval. Each change is an operator action (who, before,
after; never a secret).

Web processes read a source through a snapshot kept for ``WEBHOOK_SOURCE_CACHE_SECONDS``
(``webhooks.selectors.webhook_source_snapshot``). This process forgets its own at once; every
other process's snapshot is at most that old, so a change that narrows what a source accepts
(a disable, a secret that ends) is in effect everywhere once that long has passed since it
committed. Those services return only then (docs/http-api.md, "Sources")."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Q, QuerySet
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from core.actors import Actor
from core.errors import InvalidPayload
from core.models import ApiClient
from trail.models import OperatorAction
from trail.services import (
    CreateSourceDetails,
    ExpectedIntervalDetails,
    RevokePreviousSecretsDetails,
    RotatePublicKeyDetails,
    RotateSecretDetails,
    SetSourceClientDetails,
    SourceEnabledDetails,
    operator_action_record,
)

from .errors import NothingToRevoke, RotationInProgress
from .models import WebhookSecret, WebhookSource
from .schemes import public_key_validate, scheme_get
from .selectors import webhook_source_key_kind, webhook_source_snapshot_forget

logger = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 86400
# The longest a rotated-out secret stays valid (docs/http-api.md, "Signature schemes").
MAX_GRACE_SECONDS = 30 * 86400


def _snapshot_forget(slug: str) -> None:
    """This process stops using its snapshot of the source at once, and again once the
    change has committed (a request in between may have read the old state)."""
    webhook_source_snapshot_forget(slug=slug)
    transaction.on_commit(lambda: webhook_source_snapshot_forget(slug=slug))


def _in_effect_everywhere(*, committed_at: float, within: float | None = None) -> None:
    """Returns once every web process's snapshot was read after the change committed at
    ``committed_at`` (``time.monotonic()``), or after ``within`` seconds if that is sooner
    (a secret that ends only then). Inside a caller's transaction there is nothing to wait
    for yet: the caller, whose commit it is, does the waiting."""
    if connection.in_atomic_block:
        return
    wait = float(settings.WEBHOOK_SOURCE_CACHE_SECONDS)
    if within is not None:
        wait = min(wait, within)
    remaining = committed_at + wait - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)


def webhook_source_change_in_effect(
    *, committed_at: float, within: float | None = None
) -> None:
    """For a caller that ran a source's service inside its own transaction (the operator
    API records the key with it): returns once the change that caller committed at
    ``committed_at`` is in effect in every web process (``_in_effect_everywhere``)."""
    _in_effect_everywhere(committed_at=committed_at, within=within)


# Every local of these services and of what they call is hidden from error reports and debug
# pages (docs/security.md, "No secrets in error reports"): they hold the secret.
@sensitive_variables()
@transaction.atomic
def webhook_source_create(
    *,
    slug: str,
    scheme: str,
    handler: str,
    actor: Actor,
    secret: str | None = None,
    client: ApiClient | None = None,
    public_key: str | None = None,
) -> tuple[WebhookSource, str]:
    """Creates a source with one secret (generated unless given; a weak one is refused,
    ``InvalidPayload``) and records the operator action; returns the source and the secret,
    which is not shown again. ``client`` binds a GitHub source to the API client whose
    deployments its statuses may move (none: any client's).

    With ``public_key`` (``whpk_...``: a producer that signs Standard Webhooks ``v1a``
    entries with its private key), the source holds that key and no secret; anything but a
    32-byte public key, or a scheme that verifies with secrets only, is refused
    (``InvalidPayload``). Returns the key as stored."""
    if public_key is not None:
        if secret is not None:
            raise InvalidPayload("a source holds secrets or public keys, not both")
        credential = public_key_validate(scheme=scheme, public_key=public_key)
        kind = WebhookSecret.Kind.PUBLIC_KEY
    else:
        signer = scheme_get(scheme)
        credential = secret or signer.secret_generate()
        signer.secret_validate(credential)
        kind = WebhookSecret.Kind.SECRET
    source = WebhookSource(slug=slug, scheme=scheme, handler=handler, client=client)
    source.full_clean(validate_constraints=False)
    source.save()
    row = WebhookSecret.objects.create(source=source, secret=credential, kind=kind)
    details = CreateSourceDetails(
        source=slug,
        source_id=source.pk,
        scheme=scheme,
        handler=handler,
        client=client.name if client is not None else None,
    )
    if kind == WebhookSecret.Kind.PUBLIC_KEY:
        details["public_key"] = credential
        details["fingerprint"] = row.fingerprint
    operator_action_record(
        action=OperatorAction.Action.CREATE_SOURCE, actor=actor, details=details
    )
    logger.info(
        "webhook_source.created",
        extra={"source": slug, "scheme": scheme, "handler": handler, "kind": kind},
    )
    return source, credential


def grace_seconds_check(grace_seconds: int) -> None:
    """A rotation's grace period: 0 to ``MAX_GRACE_SECONDS``, else ``InvalidPayload``."""
    if not 0 <= grace_seconds <= MAX_GRACE_SECONDS:
        raise InvalidPayload(
            f"the grace period is 0 to {MAX_GRACE_SECONDS} seconds (30 days)",
            details={"grace_seconds": [f"0 to {MAX_GRACE_SECONDS} seconds."]},
        )


def _kind_check(*, source: WebhookSource, kind: str) -> None:
    """A rotation keeps to what the source holds: a source whose producer signs with a
    private key is never given a secret (which would make it accept ``v1`` signatures
    again), nor a secret source a public key (docs/http-api.md, "Signature schemes")."""
    held = webhook_source_key_kind(source=source)
    if held is None or held == kind:
        return
    if held == WebhookSecret.Kind.PUBLIC_KEY:
        message = (
            f"{source.slug} verifies its producer's Ed25519 signatures (v1a) with a public "
            "key: rotate it to a new public key (--public-key whpk_...)"
        )
        raise InvalidPayload(message, details={"secret": [message]})
    message = (
        f"{source.slug} verifies with secrets: a rotation cannot turn it into a "
        "public-key source; create a source with --public-key for a producer that "
        "signs v1a"
    )
    raise InvalidPayload(message, details={"public_key": [message]})


@sensitive_variables()
def webhook_source_rotate(
    *,
    source: WebhookSource,
    actor: Actor,
    secret: str | None = None,
    grace_seconds: int = DEFAULT_GRACE_SECONDS,
    reason: str = "",
    public_key: str | None = None,
    force: bool = True,
) -> str:
    """Adds a new secret that signs from now on; the secrets valid until now stay valid for
    ``grace_seconds`` more (0 to ``MAX_GRACE_SECONDS``; an earlier expiry is kept). Records
    who rotated and why as an operator action, never the secret. Returns the new secret,
    once the old ones' end is in effect in every web process (at once with a grace of 0).

    With ``public_key``, the same for a source that holds its producer's public key: the new
    key verifies from now on, the old ones for the grace period; the operator action
    (``rotate_public_key``) names the new key and its fingerprint. A rotation never changes
    what a source holds (``InvalidPayload``: a secret for a public-key source, or the
    reverse).

    The source's row is locked for the rotation (``FOR NO KEY UPDATE``: deliveries, whose
    foreign key check reads it, never wait for it): two rotations at once run one after the
    other, so the second one limits the first one's new secret to its grace period too.

    Without ``force`` (the operator API's default) a rotation while an earlier one's grace
    period is still open is refused (``RotationInProgress``, changing nothing): it would cut
    that grace short for a producer that may not have switched yet."""
    grace_seconds_check(grace_seconds)
    if public_key is not None:
        if secret is not None:
            raise InvalidPayload("a source holds secrets or public keys, not both")
        credential = public_key_validate(scheme=source.scheme, public_key=public_key)
        kind = WebhookSecret.Kind.PUBLIC_KEY
    else:
        signer = scheme_get(source.scheme)
        credential = secret or signer.secret_generate()
        signer.secret_validate(credential)
        kind = WebhookSecret.Kind.SECRET
    with transaction.atomic():
        WebhookSource.objects.select_for_update(no_key=True).filter(
            pk=source.pk
        ).first()
        _kind_check(source=source, kind=kind)
        now = timezone.now()
        if not force:
            open_until = _previous_valid(source=source, now=now).aggregate(
                end=Max("expires_at")
            )["end"]
            if open_until is not None:
                raise RotationInProgress(open_until)
        grace_end = now + timedelta(seconds=grace_seconds)
        WebhookSecret.objects.filter(source=source).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=grace_end)
        ).update(expires_at=grace_end)
        row = WebhookSecret.objects.create(
            source=source, secret=credential, kind=kind, created_at=now
        )
        if kind == WebhookSecret.Kind.PUBLIC_KEY:
            operator_action_record(
                action=OperatorAction.Action.ROTATE_PUBLIC_KEY,
                actor=actor,
                reason=reason,
                details=RotatePublicKeyDetails(
                    source=source.slug,
                    grace_seconds=grace_seconds,
                    public_key=credential,
                    fingerprint=row.fingerprint,
                ),
            )
        else:
            operator_action_record(
                action=OperatorAction.Action.ROTATE_SECRET,
                actor=actor,
                reason=reason,
                details=RotateSecretDetails(
                    source=source.slug, grace_seconds=grace_seconds
                ),
            )
        _snapshot_forget(source.slug)
    _in_effect_everywhere(committed_at=time.monotonic(), within=grace_seconds)
    logger.info(
        "webhook_source.rotated",
        extra={"source": source.slug, "grace_seconds": grace_seconds, "kind": kind},
    )
    return credential


def _previous_valid(*, source: WebhookSource, now: datetime) -> QuerySet[WebhookSecret]:
    """The source's secrets (or public keys) that an earlier rotation left valid for its
    grace period, not ended yet."""
    return WebhookSecret.objects.filter(source=source, expires_at__gt=now)


@sensitive_variables()
def webhook_source_revoke_previous(
    *, source: WebhookSource, actor: Actor, reason: str = ""
) -> int:
    """Ends now the grace period of the secrets (or public keys) the source's last rotations
    left valid, so that only the newest verifies; records the operator action (how many,
    by fingerprint) and returns how many ended, once that is in effect in every web process.
    None left (``NothingToRevoke``): nothing is recorded."""
    with transaction.atomic():
        WebhookSource.objects.select_for_update(no_key=True).filter(
            pk=source.pk
        ).first()
        now = timezone.now()
        previous = list(_previous_valid(source=source, now=now).order_by("pk"))
        if not previous:
            raise NothingToRevoke(source.slug)
        WebhookSecret.objects.filter(pk__in=[row.pk for row in previous]).update(
            expires_at=now
        )
        operator_action_record(
            action=OperatorAction.Action.REVOKE_PREVIOUS_SECRETS,
            actor=actor,
            reason=reason,
            details=RevokePreviousSecretsDetails(
                source=source.slug,
                revoked=len(previous),
                fingerprints=[row.fingerprint for row in previous],
            ),
        )
        _snapshot_forget(source.slug)
    _in_effect_everywhere(committed_at=time.monotonic())
    logger.info(
        "webhook_source.previous_revoked",
        extra={"source": source.slug, "revoked": len(previous)},
    )
    return len(previous)


def webhook_source_set_enabled(
    *, source: WebhookSource, enabled: bool, actor: Actor, reason: str = ""
) -> OperatorAction | None:
    """Enables or disables ``source`` (a disabled source answers 404) and records the
    operator action with the state before and after; a source already in that state is left
    as it is and nothing is recorded (``None``). A disable returns once it is in effect in
    every web process."""
    with transaction.atomic():
        locked = WebhookSource.objects.select_for_update(no_key=True).get(pk=source.pk)
        before = locked.is_enabled
        if before == enabled:
            return None
        WebhookSource.objects.filter(pk=source.pk).update(
            is_enabled=enabled, updated_at=timezone.now()
        )
        source.is_enabled = enabled
        action = operator_action_record(
            action=OperatorAction.Action.ENABLE_SOURCE
            if enabled
            else OperatorAction.Action.DISABLE_SOURCE,
            actor=actor,
            reason=reason,
            details=SourceEnabledDetails(
                source=source.slug, source_id=source.pk, before=before, after=enabled
            ),
        )
        _snapshot_forget(source.slug)
    if not enabled:
        _in_effect_everywhere(committed_at=time.monotonic())
    logger.info(
        "webhook_source.enabled" if enabled else "webhook_source.disabled",
        extra={"source": source.slug},
    )
    return action


@transaction.atomic
def webhook_source_expected_interval_set(
    *, source: WebhookSource, seconds: int | None, actor: Actor
) -> OperatorAction | None:
    """Sets how long the source normally goes without a new event (``None``: no
    expectation), recording the operator action with the value before and after (nothing
    when it does not change). Only the "no delivery" alert reads it, through /metrics."""
    locked = WebhookSource.objects.select_for_update(no_key=True).get(pk=source.pk)
    before = locked.expected_delivery_interval_seconds
    source.expected_delivery_interval_seconds = seconds
    if before == seconds:
        return None
    WebhookSource.objects.filter(pk=source.pk).update(
        expected_delivery_interval_seconds=seconds, updated_at=timezone.now()
    )
    action = operator_action_record(
        action=OperatorAction.Action.SET_EXPECTED_INTERVAL,
        actor=actor,
        details=ExpectedIntervalDetails(
            source=source.slug, source_id=source.pk, before=before, after=seconds
        ),
    )
    logger.info(
        "webhook_source.expected_interval_set",
        extra={"source": source.slug, "expected_delivery_interval_seconds": seconds},
    )
    return action


@transaction.atomic
def webhook_source_client_set(
    *, source: WebhookSource, client: ApiClient | None, actor: Actor, reason: str = ""
) -> OperatorAction | None:
    """Binds a source to the API client whose deployments its GitHub statuses may move
    (``None``: any client's), recording the operator action with the client before and
    after (nothing when it does not change). Under the source's row lock: two changes at
    once each record what they found."""
    locked = WebhookSource.objects.select_for_update(no_key=True).get(pk=source.pk)
    before = locked.client
    source.client = client
    if (before.pk if before else None) == (client.pk if client else None):
        return None
    WebhookSource.objects.filter(pk=source.pk).update(
        client=client, updated_at=timezone.now()
    )
    action = operator_action_record(
        action=OperatorAction.Action.SET_SOURCE_CLIENT,
        actor=actor,
        reason=reason,
        details=SetSourceClientDetails(
            source=source.slug,
            source_id=source.pk,
            client_before=before.name if before else None,
            client_after=client.name if client else None,
        ),
    )
    logger.info(
        "webhook_source.client_set",
        extra={"source": source.slug, "client": client.name if client else None},
    )
    return action
