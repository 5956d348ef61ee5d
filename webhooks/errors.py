"""Typed errors of the ingest path. Their HTTP status and ``error`` code are class attributes;
``core.exceptions.error_json_response`` is the one place that turns them into responses."""

from core.errors import ServiceError


class UnknownSource(ServiceError):
    status_code = 404
    code = "unknown_source"


class InvalidSignature(ServiceError):
    """Authentication failed. The precise ``reason`` (missing, malformed, mismatch) goes to logs
    and metrics only; the producer always sees ``unauthorized``."""

    status_code = 401
    code = "unauthorized"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class StaleTimestamp(ServiceError):
    status_code = 400
    code = "timestamp_out_of_window"
    reason = "timestamp_out_of_window"


class InconsistentDuplicate(ServiceError):
    status_code = 409
    code = "inconsistent_duplicate"

    def __init__(self, *, event_id: str):
        super().__init__(
            "inconsistent duplicate",
            extra={"status": "rejected_inconsistent_duplicate", "event_id": event_id},
        )


class SourceAlreadyPaused(ServiceError):
    """A pause of a source that is paused already: nothing changes, nothing is recorded."""

    status_code = 409
    code = "source_already_paused"


class SourceNotPaused(ServiceError):
    """A resume of a source that is not paused (perhaps still draining after an earlier
    resume): nothing changes, nothing is recorded."""

    status_code = 409
    code = "source_not_paused"
