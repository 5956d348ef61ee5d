"""The one recorder of operator actions (docs/architecture.md, "Adding an operator action").

Every service that changes something on an operator's behalf records it here, in its own
transaction: who (an ``core.actors.Actor``, built once by the admin or the command), what
(``OperatorAction.Action``), why, which inbox rows, and the action's ``details``, whose shape
is declared per action below and checked on every record, so that an auditor (and the
dashboard, and the trail's verification) reads the same keys in every record of one kind."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from django.db import models

from core.actors import Actor

from .models import OperatorAction


class ReplayDetails(TypedDict):
    """``replay`` and ``bulk_replay``: each replayed row's status and attempts before."""

    previous: dict[str, dict[str, Any]]


class MarkInvestigatedDetails(TypedDict):
    mismatch_ids: list[int]


class RotateSecretDetails(TypedDict):
    source: str
    grace_seconds: int


class RotatePublicKeyDetails(RotateSecretDetails):
    """The new public key itself (not a secret) and its fingerprint, the name the inbox
    rows it verifies record."""

    public_key: str
    fingerprint: str


class PurgeBodiesDetails(TypedDict):
    """``purged_at`` is the stamp the purged rows got (``retention.purge_stamp``), which
    verification compares with their ``body_purged_at``."""

    purged_at: str
    older_than: str


class PurgeEvidenceBodiesDetails(TypedDict):
    """The evidence rows whose conflicting body was dropped, and the stamp they got."""

    purged_at: str
    older_than: str
    mismatch_ids: list[int]


class PurgeSignatureFailuresDetails(TypedDict):
    older_than: str
    deleted: int


class _BulkReplayControlDetails(TypedDict):
    rate: float | None
    run: int
    processed: int
    total: int


class StartBulkReplayDetails(_BulkReplayControlDetails):
    pass


class PauseBulkReplayDetails(_BulkReplayControlDetails):
    state_before: str


class CancelBulkReplayDetails(_BulkReplayControlDetails):
    state_before: str


class ResumeBulkReplayDetails(_BulkReplayControlDetails):
    rate_changed: bool


class HeldDetails(TypedDict):
    """A source and how many of its events waited (a capped count)."""

    source: str
    source_id: int
    held_events: int
    held_events_capped: bool


class PauseSourceDetails(HeldDetails, total=False):
    drain_interrupted: bool


class ResumeSourceDetails(HeldDetails):
    rate: float | None
    paused_at: str
    paused_by: str
    pause_reason: str


class _SourceDetails(TypedDict):
    source: str
    source_id: int


class _CreateSourceDetails(_SourceDetails):
    scheme: str
    handler: str
    client: str | None  # the API client a GitHub source is bound to


class CreateSourceDetails(_CreateSourceDetails, total=False):
    # A source created with a producer's public key: the key and its fingerprint.
    public_key: str
    fingerprint: str


class SourceEnabledDetails(_SourceDetails):
    before: bool
    after: bool


class ExpectedIntervalDetails(_SourceDetails):
    before: int | None
    after: int | None


class CreateApiClientDetails(TypedDict):
    """A new API client: its name and the first characters of its token (never the token)."""

    client: str
    client_id: int
    token_prefix: str
    role: str


class ApiClientActiveDetails(TypedDict):
    client: str
    client_id: int
    before: bool
    after: bool


class SetSourceClientDetails(_SourceDetails):
    """The API client a GitHub source may move the deployments of (``None``: any)."""

    client_before: str | None
    client_after: str | None


class DeployTargetDetails(TypedDict):
    """``create_deploy_target`` and ``change_deploy_target``: the target's settings before
    (``{}`` for a new one) and after, its secret as a fingerprint only."""

    target: str
    target_id: int
    before: dict[str, Any]
    after: dict[str, Any]


class DeployTargetBreakerDetails(TypedDict):
    """A change of a deploy target's circuit breaker (``closed``, ``open``, ``half_open``):
    why (``failures``: its attempts failed in a row; ``cooldown``: a probe goes;
    ``probe_succeeded``, ``probe_failed``, ``probe_lost``; ``operator``), the failed
    attempts in a row it had, and the job whose attempt probes it (its public id, or
    ``""``)."""

    target: str
    target_id: int
    previous: str
    state: str
    cause: str
    failures: int
    probe_job: str


class TestDeployTargetDetails(TypedDict):
    """A test of a target asked for (recorded before a worker sends it), with the test's
    row (``deployments.DeployTargetTest``, which holds its outcome)."""

    target: str
    target_id: int
    test_id: int
    executor: str
    url: str


class ApiClientRoleDetails(TypedDict):
    """An API client's role changed (``core.models.ApiRole``), before and after."""

    client: str
    client_id: int
    before: str
    after: str


class RevokePreviousSecretsDetails(TypedDict):
    """The secrets (or public keys) a rotation left valid for its grace period, ended now:
    how many, by fingerprint."""

    source: str
    revoked: int
    fingerprints: list[str]


class EvictIdempotencyKeyDetails(TypedDict):
    """A live idempotency record marked expired by an operator, so that its key starts a
    new operation: whose key, for what, and what it had started."""

    client: str
    client_id: int
    operation_type: str
    key: str
    record_id: int
    resource_id: str
    status: str


class DropInboxPartitionDetails(TypedDict):
    """A day of the inbox gone with its partitions (``webhooks.partitions``): the partition
    of each table, the day's bounds (``start`` null for the rows stored before partitioning),
    how many events and attempts left, and the range of the events' ids."""

    events_partition: str
    attempts_partition: str
    start: str | None
    end: str
    events: int
    attempts: int
    first_event_id: int | None
    last_event_id: int | None


Action = OperatorAction.Action


class SwitchDependencyDetails(TypedDict):
    """A demo dependency switched down (``up`` false) or back up (``demo.services``)."""

    dependency: str
    up: bool


DETAILS_SHAPES: dict[str, type] = {
    Action.REPLAY: ReplayDetails,
    Action.BULK_REPLAY: ReplayDetails,
    Action.MARK_INVESTIGATED: MarkInvestigatedDetails,
    Action.ROTATE_SECRET: RotateSecretDetails,
    Action.ROTATE_PUBLIC_KEY: RotatePublicKeyDetails,
    Action.PURGE_BODIES: PurgeBodiesDetails,
    Action.PURGE_EVIDENCE_BODIES: PurgeEvidenceBodiesDetails,
    Action.PURGE_SIGNATURE_FAILURES: PurgeSignatureFailuresDetails,
    Action.START_BULK_REPLAY: StartBulkReplayDetails,
    Action.CANCEL_BULK_REPLAY: CancelBulkReplayDetails,
    Action.RESUME_BULK_REPLAY: ResumeBulkReplayDetails,
    Action.PAUSE_SOURCE: PauseSourceDetails,
    Action.RESUME_SOURCE: ResumeSourceDetails,
    Action.CREATE_SOURCE: CreateSourceDetails,
    Action.ENABLE_SOURCE: SourceEnabledDetails,
    Action.DISABLE_SOURCE: SourceEnabledDetails,
    Action.SET_EXPECTED_INTERVAL: ExpectedIntervalDetails,
    Action.CREATE_API_CLIENT: CreateApiClientDetails,
    Action.ACTIVATE_API_CLIENT: ApiClientActiveDetails,
    Action.DEACTIVATE_API_CLIENT: ApiClientActiveDetails,
    Action.SET_SOURCE_CLIENT: SetSourceClientDetails,
    Action.CREATE_DEPLOY_TARGET: DeployTargetDetails,
    Action.CHANGE_DEPLOY_TARGET: DeployTargetDetails,
    Action.TEST_DEPLOY_TARGET: TestDeployTargetDetails,
    Action.SWITCH_DEPENDENCY: SwitchDependencyDetails,
    Action.SET_DEPLOY_TARGET_BREAKER: DeployTargetBreakerDetails,
    Action.SET_API_CLIENT_ROLE: ApiClientRoleDetails,
    Action.PAUSE_BULK_REPLAY: PauseBulkReplayDetails,
    Action.REVOKE_PREVIOUS_SECRETS: RevokePreviousSecretsDetails,
    Action.EVICT_IDEMPOTENCY_KEY: EvictIdempotencyKeyDetails,
    Action.DROP_INBOX_PARTITION: DropInboxPartitionDetails,
}


def _details_check(action: str, details: Mapping[str, Any]) -> None:
    shape = DETAILS_SHAPES.get(action)
    if shape is None:
        raise TypeError(f"no operator action {str(action)!r}")
    required = shape.__required_keys__  # type: ignore[attr-defined]
    allowed = required | shape.__optional_keys__  # type: ignore[attr-defined]
    missing = sorted(required - details.keys())
    unknown = sorted(details.keys() - allowed)
    if missing or unknown:
        raise TypeError(
            f"details of a {str(action)!r} action: missing {missing}, unknown {unknown}"
        )


def operator_action_record(
    *,
    action: str,
    actor: Actor,
    details: Mapping[str, Any],
    reason: str = "",
    event_ids: Sequence[int] = (),
    event_count: int | None = None,
    skipped_count: int = 0,
    bulk_job: models.Model | None = None,
) -> OperatorAction:
    """Records one operator action, in the caller's transaction (so that the action and the
    change it records commit together). ``bulk_job`` is a ``webhooks.BulkReplayJob``.
    ``event_ids`` are the inbox rows it touched
    (``event_count`` defaults to their number); ``details`` must have the action's shape
    (``DETAILS_SHAPES``): a key missing or unknown raises ``TypeError`` and records
    nothing."""
    _details_check(action, details)
    return OperatorAction.objects.create(
        action=action,
        actor=actor.user,
        actor_name=actor.name[:255],
        reason=reason,
        event_ids=list(event_ids),
        event_count=len(event_ids) if event_count is None else event_count,
        skipped_count=skipped_count,
        details=dict(details),
        bulk_job=bulk_job,
    )
