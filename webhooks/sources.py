"""Sources and their secrets: create, rotate, enable and disable, the expected delivery
interval. A change reaches this process's snapshot at once and every other web process within
``WEBHOOK_SOURCE_CACHE_SECONDS`` (``webhooks.selectors.webhook_source_snapshot``)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from core.actors import Actor
from core.models import ApiClient

from .models import OperatorAction, WebhookSecret, WebhookSource
from .operator_actions import (
    RotateSecretDetails,
    SetSourceClientDetails,
    operator_action_record,
)
from .schemes import scheme_get
from .selectors import webhook_source_snapshot_forget

logger = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 86400


def _snapshot_forget(slug: str) -> None:
    """This process stops using its snapshot of the source at once, and again once the
    change has committed (a request in between may have read the old state). Other processes
    see the change within ``WEBHOOK_SOURCE_CACHE_SECONDS``."""
    webhook_source_snapshot_forget(slug=slug)
    transaction.on_commit(lambda: webhook_source_snapshot_forget(slug=slug))


# Every local of these services and of what they call is hidden from error reports and debug
# pages (docs/security.md, "No secrets in error reports"): they hold the secret.
@sensitive_variables()
@transaction.atomic
def webhook_source_create(
    *,
    slug: str,
    scheme: str,
    handler: str,
    secret: str | None = None,
    client: ApiClient | None = None,
) -> tuple[WebhookSource, str]:
    """Creates a source with one secret; returns the source and the secret (not shown again).
    ``client`` binds a GitHub source to the API client whose deployments it may move."""
    signer = scheme_get(scheme)
    secret = secret or signer.secret_generate()
    signer.secret_validate(secret)
    source = WebhookSource(slug=slug, scheme=scheme, handler=handler, client=client)
    source.full_clean(validate_constraints=False)
    source.save()
    WebhookSecret.objects.create(source=source, secret=secret)
    logger.info(
        "webhook_source.created",
        extra={"source": slug, "scheme": scheme, "handler": handler},
    )
    return source, secret


@sensitive_variables()
@transaction.atomic
def webhook_source_rotate(
    *,
    source: WebhookSource,
    secret: str | None = None,
    grace_seconds: int = DEFAULT_GRACE_SECONDS,
    actor: Actor,
    reason: str = "",
) -> str:
    """Adds a new secret that signs from now on; the secrets valid until now stay valid for
    ``grace_seconds`` more (an earlier expiry is kept). Records who rotated and why as an
    operator action, never the secret. Returns the new secret.

    The source's row is locked for the rotation: two rotations at once run one after the
    other, so the second one limits the first one's new secret to its grace period too."""
    signer = scheme_get(source.scheme)
    secret = secret or signer.secret_generate()
    signer.secret_validate(secret)
    WebhookSource.objects.select_for_update().filter(pk=source.pk).first()
    now = timezone.now()
    grace_end = now + timedelta(seconds=max(grace_seconds, 0))
    WebhookSecret.objects.filter(source=source).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=grace_end)
    ).update(expires_at=grace_end)
    WebhookSecret.objects.create(source=source, secret=secret, created_at=now)
    operator_action_record(
        action=OperatorAction.Action.ROTATE_SECRET,
        actor=actor,
        reason=reason,
        details=RotateSecretDetails(source=source.slug, grace_seconds=grace_seconds),
    )
    _snapshot_forget(source.slug)
    logger.info(
        "webhook_source.rotated",
        extra={"source": source.slug, "grace_seconds": grace_seconds},
    )
    return secret


def webhook_source_set_enabled(*, source: WebhookSource, enabled: bool) -> None:
    WebhookSource.objects.filter(pk=source.pk).update(
        is_enabled=enabled, updated_at=timezone.now()
    )
    _snapshot_forget(source.slug)
    logger.info(
        "webhook_source.enabled" if enabled else "webhook_source.disabled",
        extra={"source": source.slug},
    )


def webhook_source_expected_interval_set(
    *, source: WebhookSource, seconds: int | None
) -> None:
    """Sets how long the source normally goes without a new event (``None``: no
    expectation). Only the "no delivery" alert reads it, through /metrics."""
    WebhookSource.objects.filter(pk=source.pk).update(
        expected_delivery_interval_seconds=seconds, updated_at=timezone.now()
    )
    source.expected_delivery_interval_seconds = seconds
    logger.info(
        "webhook_source.expected_interval_set",
        extra={"source": source.slug, "expected_delivery_interval_seconds": seconds},
    )


@transaction.atomic
def webhook_source_client_set(
    *, source: WebhookSource, client: ApiClient | None, actor: Actor, reason: str = ""
) -> bool:
    """Binds a source to the API client whose deployments its GitHub statuses may move
    (``None``: any client's), as an operator action. Returns whether it changed (an
    unchanged binding records nothing). Under the source's row lock: two changes at once
    record what each found before."""
    locked = WebhookSource.objects.select_for_update().get(pk=source.pk)
    before = locked.client
    if (before.pk if before else None) == (client.pk if client else None):
        return False
    WebhookSource.objects.filter(pk=source.pk).update(
        client=client, updated_at=timezone.now()
    )
    source.client = client
    operator_action_record(
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
    return True
