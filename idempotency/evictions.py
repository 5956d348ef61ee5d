"""An operator's eviction of a key (docs/http-api.md, "Operator API"): the key's live record
marked expired now, as its TTL would have marked it, so that the key's next request starts
a new operation; the record stays for audit, and the eviction is an operator action."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from core.actors import Actor
from core.errors import NotFound
from core.models import ApiClient
from trail.models import OperatorAction
from trail.services import EvictIdempotencyKeyDetails, operator_action_record

from .models import IdempotencyRecord

logger = logging.getLogger(__name__)


def idempotency_record_evict(
    *, client: ApiClient, operation_type: str, key: str, actor: Actor, reason: str
) -> IdempotencyRecord:
    """Marks the live record of ``client``'s ``key`` for ``operation_type`` expired now
    (``expired_at``) and records the operator action, in one transaction, under the
    record's row lock: of two evictions at once, one evicts and the other finds nothing.

    Live is what a retry would replay (``services.idempotency_live_record`` with
    ``unexpired``): not marked expired, and within its TTL. A record past its TTL is
    expired already (the lookup says so, the key's next request starts anew): like a key
    never used, it is ``NotFound``, and nothing is recorded."""
    now = timezone.now()
    with transaction.atomic():
        record = (
            IdempotencyRecord.objects.select_for_update()
            .filter(
                client=client,
                operation_type=operation_type,
                key=key,
                expired_at__isnull=True,
                expires_at__gt=now,
            )
            .defer("response_body")
            .first()
        )
        if record is None:
            raise NotFound()
        record.expired_at = now
        record.updated_at = now
        record.save(update_fields=["expired_at", "updated_at"])
        operator_action_record(
            action=OperatorAction.Action.EVICT_IDEMPOTENCY_KEY,
            actor=actor,
            reason=reason,
            details=EvictIdempotencyKeyDetails(
                client=client.name,
                client_id=client.pk,
                operation_type=operation_type,
                key=key,
                record_id=record.pk,
                resource_id=record.resource_id,
                status=record.status,
            ),
        )
    logger.info(
        "idempotency.evicted",
        extra={
            "client_id": client.pk,
            "operation_type": operation_type,
            "idempotency_key": key,
            "record_id": record.pk,
            "actor": actor.name,
        },
    )
    return record
