"""Typed errors of the Idempotency-Key contract; ``core.exceptions`` maps every
``ServiceError`` to its status and ``error`` code (docs/http-api.md lists them)."""

from core.errors import ServiceError


class IdempotencyKeyRequired(ServiceError):
    status_code = 400
    code = "idempotency_key_required"


class InvalidIdempotencyKey(ServiceError):
    status_code = 400
    code = "invalid_idempotency_key"


class IdempotencyKeyReused(ServiceError):
    """The key was used before, by this client, for an operation with another fingerprint."""

    status_code = 409
    code = "idempotency_key_reused"

    def __init__(self, *, differing_fields: list[str]):
        super().__init__(extra={"differing_fields": differing_fields})
