"""The inbox's typed errors, every one a ``core.errors.ServiceError``: those of ingest (an
unknown source, a signature or timestamp refused, an inconsistent duplicate), and those of the
operators' services (pausing and resuming a source, replay and bulk replay jobs). Each carries
its HTTP status and stable ``error`` code as class attributes: ``core.exceptions`` turns them
into API answers in one place, and the admin and the commands catch ``ServiceError`` once and
show its message."""

from enum import StrEnum

from core.errors import InvalidPayload, NotFound, ServiceError


class UnknownSource(ServiceError):
    status_code = 404
    code = "unknown_source"


class SignatureFailureReason(StrEnum):
    """Why a delivery failed authentication, as ``SignatureFailure.reason``, the logs and the
    ``webhook_signature_failures_total`` metric name it (never the producer: it sees
    ``unauthorized`` or ``timestamp_out_of_window``)."""

    MISSING = "missing"  # no signature header, or an empty one
    MALFORMED = "malformed"  # a header with no parsable entry of a known version
    MISMATCH = "mismatch"  # a parsable entry that matches no secret
    STALE_TIMESTAMP = "timestamp_out_of_window"


class InvalidSignature(ServiceError):
    """Authentication failed. The precise ``reason`` (missing, malformed, mismatch) goes to logs
    and metrics only; the producer always sees ``unauthorized``."""

    status_code = 401
    code = "unauthorized"

    def __init__(self, reason: SignatureFailureReason):
        super().__init__(reason)
        self.reason = reason


class StaleTimestamp(ServiceError):
    status_code = 400
    code = "timestamp_out_of_window"
    reason = SignatureFailureReason.STALE_TIMESTAMP


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


class NothingToReplay(ServiceError):
    """No selected row was in a replayable status."""

    status_code = 409
    code = "nothing_to_replay"


class ReplayRepeatsUnconfirmed(ServiceError):
    """A replay of events whose cause the same bytes meet again (their data was rejected),
    asked without saying so: nothing was replayed."""

    status_code = 409
    code = "replay_repeats_unconfirmed"

    def __init__(self, count: int):
        super().__init__(
            f"{count} of the events were dead-lettered because their data was rejected: a "
            "replay sends the same bytes, which will be rejected again; confirm to replay "
            "them anyway"
        )
        self.count = count


class SelectionTooLarge(ServiceError):
    """More rows were selected than one action takes in one transaction (a replay: the work
    of a bulk replay job then; marking mismatches investigated)."""

    status_code = 422
    code = "selection_too_large"

    def __init__(self, limit: int):
        super().__init__(f"more than {limit} events selected")
        self.limit = limit


class BulkReplayJobNotFound(NotFound):
    code = "bulk_replay_job_not_found"


class BulkReplayJobNotStartable(ServiceError):
    """The job is not waiting to start (already started or finished)."""

    status_code = 409
    code = "bulk_replay_job_not_startable"


class BulkReplayJobNotResumable(ServiceError):
    """The job is neither failed, cancelled nor interrupted: still running (its lease holds),
    waiting to start, or finished."""

    status_code = 409
    code = "bulk_replay_job_not_resumable"


class BulkReplayJobNotCancellable(ServiceError):
    """The job is neither queued nor running: waiting to start, or already over."""

    status_code = 409
    code = "bulk_replay_job_not_cancellable"


class InvalidBulkReplayRate(InvalidPayload):
    """A rate that is not a number of events per second within the accepted range."""


class InvalidBulkReplaySince(InvalidPayload):
    """A "since" outside the instants a stored date may hold (``core.times``)."""


class RotationInProgress(ServiceError):
    """A rotation asked for while an earlier one's grace period is open (the operator API
    refuses it unless told ``force``)."""

    status_code = 409
    code = "rotation_in_progress"

    def __init__(self, open_until) -> None:
        super().__init__(
            "an earlier rotation's previous secret is valid until "
            f"{open_until.isoformat()}: revoke it first, or rotate with force",
            extra={"previous_valid_until": open_until.isoformat()},
        )


class NothingToRevoke(ServiceError):
    """No secret of the source is in a rotation's grace period."""

    status_code = 409
    code = "nothing_to_revoke"

    def __init__(self, slug: str) -> None:
        super().__init__(f"{slug} has no previous secret in a grace period")
