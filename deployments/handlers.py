"""The GitHub handler (``webhooks.handlers.HANDLERS["github"]``): ``ping`` and
``deployment_status`` events from the webhook inbox."""

from __future__ import annotations

import json
import logging
from datetime import datetime

from django.db.models import CharField, F, Value
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.errors import PermanentProcessingError
from webhooks.handlers import HandlerResult
from webhooks.models import InboxEvent, ProcessingStatus

from .models import TERMINAL_JOB_STATUSES, Deployment, JobStatus
from .services import job_status_set

logger = logging.getLogger(__name__)

GITHUB_STATES: dict[str, str] = {
    "success": JobStatus.SUCCEEDED,
    "failure": JobStatus.FAILED,
    "error": JobStatus.FAILED,
    "in_progress": JobStatus.RUNNING,
    "queued": JobStatus.QUEUED,
    "pending": JobStatus.QUEUED,
}


def github_event_handle(event: InboxEvent) -> HandlerResult:
    """Called with the inbox row locked, inside the processing transaction."""
    if event.event_type == "ping":
        return HandlerResult(status=ProcessingStatus.PROCESSED, note="ping")
    if event.event_type == "deployment_status":
        return _deployment_status_handle(event)
    return HandlerResult(status=ProcessingStatus.IGNORED_UNSUPPORTED)


def _payload(event: InboxEvent) -> dict:
    try:
        payload = json.loads(bytes(event.raw_body))
    except (TypeError, ValueError) as exc:
        raise PermanentProcessingError("body is not JSON") from exc
    if not isinstance(payload, dict):
        raise PermanentProcessingError("body is not a JSON object")
    return payload


def _deployment_status_handle(event: InboxEvent) -> HandlerResult:
    payload = _payload(event)
    try:
        deployment_status = payload["deployment_status"]
        state = deployment_status["state"]
        status_id = int(deployment_status["id"])
        sha = str(payload["deployment"]["sha"]).lower()
        environment = str(payload["deployment"]["environment"])
        repository = str(payload["repository"]["full_name"]).lower()
    except (KeyError, TypeError, ValueError) as exc:
        raise PermanentProcessingError(
            f"deployment_status without {exc.__class__.__name__}: {exc}"
        ) from exc
    status = GITHUB_STATES.get(state)
    if status is None:
        raise PermanentProcessingError(f"unknown deployment_status state {state!r}")

    deployment = (
        Deployment.objects.select_for_update()
        .alias(github_sha=Value(sha, output_field=CharField()))
        .filter(
            repository=repository,
            environment=environment,
            github_sha__startswith=F("commit_sha"),
        )
        .order_by("-id")
        .first()
    )
    if deployment is None:
        return HandlerResult(
            status=ProcessingStatus.PROCESSED,
            note="no matching deployment",
            details={"repository": repository, "environment": environment},
        )
    details = {"deployment_id": deployment.public_id, "deployment_status_id": status_id}
    if (
        deployment.last_github_status_id is not None
        and status_id <= deployment.last_github_status_id
    ) or (
        deployment.status in TERMINAL_JOB_STATUSES
        and status not in TERMINAL_JOB_STATUSES
    ):
        return HandlerResult(
            status=ProcessingStatus.IGNORED_OUT_OF_ORDER,
            note="older or non-terminal after terminal",
            details=details,
        )
    deployment.last_github_status_id = status_id
    deployment.save(update_fields=["last_github_status_id"])
    job_status_set(
        job=deployment,
        status=status,
        at=_reported_at(deployment_status),
        actor=f"github:{event.event_id}",
        detail=str(deployment_status.get("description") or "")[:1000],
    )
    return HandlerResult(
        status=ProcessingStatus.PROCESSED,
        note=f"deployment {status}",
        details=details,
    )


def _reported_at(deployment_status: dict) -> datetime:
    """GitHub's time of the status, never before now's ordering point for local reports."""
    value = deployment_status.get("updated_at") or deployment_status.get("created_at")
    parsed = parse_datetime(value) if isinstance(value, str) else None
    return parsed or timezone.now()
