"""Typed errors raised by services. ``core.exceptions`` maps each to its HTTP status and the
stable ``error`` code (docs/http-api.md, "Errors"); nothing else decides those."""

from typing import Any


class ServiceError(Exception):
    status_code = 400
    code = "bad_request"

    def __init__(
        self, message: str = "", *, details: Any = None, extra: dict | None = None
    ):
        super().__init__(message or self.code)
        self.details = details
        self.extra = extra or {}

    def body(self) -> dict:
        body: dict[str, Any] = {"error": self.code}
        if self.details is not None:
            body["details"] = self.details
        body.update(self.extra)
        return body


class Unauthorized(ServiceError):
    status_code = 401
    code = "unauthorized"


class NotFound(ServiceError):
    status_code = 404
    code = "not_found"


class InvalidJson(ServiceError):
    status_code = 400
    code = "invalid_json"


class UnreadableBody(ServiceError):
    """The request's body could not be read to its end: a malformed chunked encoding, or a
    connection that ended before the body did."""

    status_code = 400
    code = "invalid_body"


class InvalidPayload(ServiceError):
    status_code = 422
    code = "invalid_payload"


class PayloadTooLarge(ServiceError):
    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaType(ServiceError):
    status_code = 415
    code = "unsupported_media_type"


class TemporarilyUnavailable(ServiceError):
    status_code = 503
    code = "temporarily_unavailable"
    retry_after_seconds = 5


class PermanentProcessingError(Exception):
    """The domain rejects the event's data: retrying cannot help, dead-letter at once."""


class TransientProcessingError(Exception):
    """Something outside the event failed (a dependency, a lock): retry with backoff."""
