from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from django.utils import timezone

from core.errors import InvalidPayload, PermanentProcessingError
from deployments.models import REPORTED_DETAIL_MAX_LENGTH, Job, JobStatus
from deployments.services.reports import (
    deployment_status_report_apply,
    workflow_run_report_apply,
)
from integrations.github.scheme import DELIVERY_HEADER
from webhooks.envelopes import (
    MAX_ID_LENGTH,
    Envelope,
    instant_parse,
    raw_fingerprint,
    text_error,
)
from webhooks.integrations import HandlerResult, SampleEvent
from webhooks.models import ProcessingStatus, WebhookSource

if TYPE_CHECKING:
    from webhooks.models import InboxEvent
    from webhooks.schemes import Verified

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EVENT_HEADER = "X-GitHub-Event"
GITHUB_STATES: dict[str, str] = {
    "success": JobStatus.SUCCEEDED,
    "failure": JobStatus.FAILED,
    "error": JobStatus.FAILED,
    "in_progress": JobStatus.RUNNING,
    "queued": JobStatus.QUEUED,
    "pending": JobStatus.QUEUED,
}


class GitHubIntegration:
    name = "github"
    label = "GitHub events"
    headers = {
        EVENT_HEADER: "github: the event type.",
        "X-GitHub-Hook-Id": "github: the id of the webhook that sent it.",
        "X-GitHub-Hook-Installation-Target-Type": "github: what the webhook belongs to "
        "(repository, organization, ...).",
        "X-GitHub-Hook-Installation-Target-Id": "github: that target's id.",
    }
    envelope_schema = None  # GitHub's own body: any JSON object
    envelope_components: dict[str, dict] = {}

    def envelope(
        self,
        *,
        body: dict,
        raw_body: bytes,
        headers: Mapping[str, str],
        verified: Verified,
    ) -> Envelope:
        """GitHub's own envelope: the id is ``X-GitHub-Delivery``, the type
        ``X-GitHub-Event``; the fingerprint is the SHA-256 of the raw body (GitHub's
        redeliveries are byte-identical). Neither header is signed (unless the source's
        scheme signs the delivery header as its id), so the body is what identifies the
        event: a copy under a fresh delivery id is a duplicate."""
        delivery = (headers.get(DELIVERY_HEADER) or "").strip()
        event_type = (headers.get(EVENT_HEADER) or "").strip()
        errors = {}
        for name, value in ((DELIVERY_HEADER, delivery), (EVENT_HEADER, event_type)):
            message = text_error(value, required=True)
            if message:
                errors[name] = [message]
        if errors:
            raise InvalidPayload(details=errors)
        repository = body.get("repository")
        entity_id = ""
        if isinstance(repository, dict) and isinstance(
            repository.get("full_name"), str
        ):
            entity_id = repository["full_name"][:MAX_ID_LENGTH].replace("\x00", "")
        return Envelope(
            event_id=delivery,
            event_type=event_type,
            content_fingerprint=raw_fingerprint(raw_body),
            entity_id=entity_id,
            entity_type="repository" if entity_id else "",
            event_id_signed=verified.event_id_signed and verified.event_id == delivery,
        )

    def handle(self, event: InboxEvent) -> HandlerResult:
        if event.event_type == "ping":
            return HandlerResult(status=ProcessingStatus.PROCESSED, note="ping")
        if event.event_type == "deployment_status":
            return _deployment_status_handle(event)
        if event.event_type == "workflow_run":
            return _workflow_run_handle(event)
        return HandlerResult(status=ProcessingStatus.IGNORED_UNSUPPORTED)

    def sample(self, *, event_id: str) -> SampleEvent:
        """GitHub's ping, its ``zen`` naming the delivery: the body is what identifies a
        GitHub event, so two samples must differ to be two events."""
        ping = json.loads((FIXTURES / "ping__basic.json").read_bytes())
        ping["zen"] = f"{ping['zen']} ({event_id})"
        return SampleEvent(
            event_id=event_id,
            raw_body=json.dumps(ping, indent=2).encode(),
            headers={EVENT_HEADER: "ping"},
        )


def _payload(event: InboxEvent) -> dict:
    if event.raw_body is None:
        raise PermanentProcessingError("the body was purged")
    try:
        payload = json.loads(bytes(event.raw_body))
    except (TypeError, ValueError) as exc:
        raise PermanentProcessingError("body is not JSON") from exc
    except RecursionError:
        # Stored before ingest refused deep bodies: no retry will read it either.
        raise PermanentProcessingError("body is nested too deep to read") from None
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
    outcome = deployment_status_report_apply(
        repository=repository,
        environment=environment,
        sha=sha,
        github_status_id=status_id,
        status=status,
        reported_at=_reported_at(deployment_status),
        actor=f"github:{event.event_id}",
        detail=str(deployment_status.get("description") or "")[
            :REPORTED_DETAIL_MAX_LENGTH
        ],
        github_deployment_id=_github_deployment_id(payload["deployment"]),
        job_id_in_payload=_job_id_in_payload(payload["deployment"]),
        client_id=_bound_client_id(event),
    )
    return _report_result(
        outcome.deployment, applied=outcome.applied, status=status, none="deployment"
    )


def _report_result(
    job: Job | None, *, applied: bool, status: str, none: str
) -> HandlerResult:
    """What a GitHub report did to the job it is about (``none``: what the note calls the
    job it found none of)."""
    if job is None:
        return HandlerResult(
            status=ProcessingStatus.PROCESSED, note=f"no matching {none}"
        )
    if not applied:
        return HandlerResult(
            status=ProcessingStatus.IGNORED_OUT_OF_ORDER,
            note="older or non-terminal after terminal",
        )
    return HandlerResult(
        status=ProcessingStatus.PROCESSED, note=f"{job.kind} {job.public_id} {status}"
    )


# A workflow run's action -> the job's status; ``completed`` goes by its conclusion.
WORKFLOW_RUN_ACTIONS: dict[str, str] = {
    "requested": JobStatus.RUNNING,
    "in_progress": JobStatus.RUNNING,
}
# Only a successful run succeeds the job: every other conclusion (failure, cancelled,
# timed_out, startup_failure, action_required, stale, skipped, neutral) fails it.
SUCCEEDED_CONCLUSIONS = frozenset({"success"})


def _workflow_run_handle(event: InboxEvent) -> HandlerResult:
    """A ``workflow_run`` delivery: the run a ``github-actions`` job dispatched moves it
    (docs/subsystems/processing.md, "GitHub")."""
    payload = _payload(event)
    try:
        action = str(payload["action"])
        run = payload["workflow_run"]
        run_id = run["id"]
        repository = str(payload["repository"]["full_name"]).lower()
    except (KeyError, TypeError) as exc:
        raise PermanentProcessingError(
            f"workflow_run without {exc.__class__.__name__}: {exc}"
        ) from exc
    if not isinstance(run_id, int) or isinstance(run_id, bool):
        raise PermanentProcessingError("workflow_run whose id is not an integer")
    conclusion = str(run.get("conclusion") or "")
    status: str
    if action == "completed":
        status = (
            JobStatus.SUCCEEDED
            if conclusion in SUCCEEDED_CONCLUSIONS
            else JobStatus.FAILED
        )
        detail = f"workflow run {run_id}: {conclusion or 'completed'}"
    elif action in WORKFLOW_RUN_ACTIONS:
        status = WORKFLOW_RUN_ACTIONS[action]
        detail = f"workflow run {run_id}: {action}"
    else:
        return HandlerResult(status=ProcessingStatus.IGNORED_UNSUPPORTED)
    names = " ".join(str(run.get(key) or "") for key in ("name", "display_title"))
    html_url = run.get("html_url")
    outcome = workflow_run_report_apply(
        repository=repository,
        run_id=run_id,
        run_name=names,
        run_url=html_url if isinstance(html_url, str) else None,
        status=status,
        reported_at=_reported_at(run),
        actor=f"github:{event.event_id}",
        detail=detail[:REPORTED_DETAIL_MAX_LENGTH],
        client_id=_bound_client_id(event),
    )
    return _report_result(
        outcome.job, applied=outcome.applied, status=status, none="job"
    )


def _github_deployment_id(deployment: dict) -> int | None:
    value = deployment.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _job_id_in_payload(deployment: dict) -> str:
    """Our id, when the ``github`` executor created this GitHub deployment
    (``payload.deployment_id``; GitHub sends the payload as an object, or as a string for
    old deployments)."""
    payload = deployment.get("payload")
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return ""
    if isinstance(payload, dict) and isinstance(payload.get("deployment_id"), str):
        return payload["deployment_id"][:32]
    return ""


def _bound_client_id(event: InboxEvent) -> int | None:
    """The API client the event's source is bound to (``None``: any client's)."""
    return (
        WebhookSource.objects.filter(pk=event.source_id)
        .values_list("client_id", flat=True)
        .first()
    )


def _reported_at(deployment_status: dict) -> datetime:
    """GitHub's time of the status (now when it has none or an unreadable one)."""
    value = deployment_status.get("updated_at") or deployment_status.get("created_at")
    parsed, _ = instant_parse(value, required=True)
    return parsed or timezone.now()
