"""Reports: statuses reported from outside, applied to the job they are about under
``report_applies`` (docs/subsystems/executors.md, "A deployment or build job").

- ``status_sync_record``: ``POST /api/status-sync/``, a client's report on one of its
  deployments or builds, recorded whether it applied or not (``StatusSync``);
- ``deployment_status_report_apply``: a GitHub ``deployment_status`` delivery, matched to
  the deployment it is about (docs/subsystems/processing.md, "GitHub");
- ``workflow_run_report_apply``: a GitHub ``workflow_run`` delivery, matched to the job
  whose run it is (the ``github-actions`` executor).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import CharField, F, Value
from django.db.models.fields.json import KT
from django.utils import timezone

from core.errors import NotFound
from core.models import ApiClient

from ..downstream import GITHUB_ACTIONS, downstream_make
from ..models import Deployment, Job, StatusSync
from .jobs import JOB_MODELS, job_save, job_status_set, report_applies


def status_sync_record(
    *,
    client: ApiClient,
    target_kind: str,
    target_id: str,
    status: str,
    reported_at: datetime,
    detail: str = "",
) -> StatusSync:
    """Applies an external status report to one of the client's deployments or builds under
    ``report_applies``, and records the report whether it applied or not."""
    job = (
        JOB_MODELS[target_kind]
        .objects.select_for_update()
        .filter(client=client, public_id=target_id)
        .first()
    )
    if job is None:
        raise NotFound()
    applied = report_applies(job=job, status=status, at=reported_at)
    if applied:
        job_status_set(
            job=job,
            status=status,
            at=reported_at,
            actor=f"status-sync:{client.name}",
            detail=detail,
        )
    return StatusSync.objects.create(
        client=client,
        status=status,
        reported_at=reported_at,
        detail=detail,
        applied=applied,
        resulting_status=job.status,
        job=job,
    )


@dataclass(frozen=True)
class StatusReportOutcome:
    deployment: Deployment | None
    applied: bool


FULL_SHA_LENGTH = 40


def _reported_at_capped(reported_at: datetime) -> datetime:
    """A GitHub report's time, at most now plus ``WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS``: a
    clock (or a payload) in the future cannot block the reports after it."""
    horizon = timezone.now() + timedelta(
        seconds=settings.WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS
    )
    return min(reported_at, horizon)


def _status_target(
    *,
    repository: str,
    environment: str,
    sha: str,
    github_deployment_id: int | None,
    job_id_in_payload: str,
    client_id: int | None,
) -> Deployment | None:
    """The deployment a GitHub status is about, locked (``deployment_status_report_apply``)."""
    candidates = Deployment.objects.select_for_update()
    if client_id is not None:
        candidates = candidates.filter(client_id=client_id)
    if github_deployment_id is not None:
        exact = (
            candidates.filter(
                github_deployment_id=github_deployment_id, repository=repository
            )
            .order_by("-id")
            .first()
        )
        if exact is not None:
            return exact
    if job_id_in_payload:
        named = candidates.filter(
            public_id=job_id_in_payload,
            repository=repository,
            environment=environment,
        ).first()
        if named is not None and named.github_deployment_id in (
            None,
            github_deployment_id,
        ):
            return named
    # A deployment made elsewhere (not one of ours on GitHub): by repository, environment
    # and commit. A short commit_sha matches a full sha it starts with only while no other
    # full commit was matched to it (``github_commit_sha``).
    elsewhere = candidates.filter(
        repository=repository,
        environment=environment,
        github_deployment_id__isnull=True,
    )
    if len(sha) == FULL_SHA_LENGTH:
        elsewhere = elsewhere.alias(
            github_sha=Value(sha, output_field=CharField())
        ).filter(
            github_sha__startswith=F("commit_sha"), github_commit_sha__in=["", sha]
        )
    else:
        elsewhere = elsewhere.filter(commit_sha=sha)
    return elsewhere.order_by("-id").first()


def deployment_status_report_apply(
    *,
    repository: str,
    environment: str,
    sha: str,
    github_status_id: int,
    status: str,
    reported_at: datetime,
    actor: str,
    detail: str = "",
    github_deployment_id: int | None = None,
    job_id_in_payload: str = "",
    client_id: int | None = None,
) -> StatusReportOutcome:
    """A deployment status reported by GitHub (docs/subsystems/processing.md, "GitHub"),
    applied under ``report_applies`` to the deployment it is about, locked until the caller's
    transaction ends:

    1. the deployment that holds GitHub's deployment id (the ``github`` executor recorded
       it), of the same repository;
    2. else the deployment our id in the GitHub deployment's payload names (same repository
       and environment), which then holds GitHub's id;
    3. else, of the deployments holding no GitHub id (made elsewhere), the most recent of
       ``repository`` to ``environment`` whose commit is ``sha``: a short ``commit_sha``
       matches the first full commit that a status names, and that commit only.

    ``client_id`` (the source's bound API client) limits all three to that client's
    deployments; without it any client's may match (a single tenant). A ``reported_at``
    further ahead than ``WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS`` counts as now plus that, so
    that a clock (or a payload) in the future cannot block the reports after it."""
    reported_at = _reported_at_capped(reported_at)
    deployment = _status_target(
        repository=repository,
        environment=environment,
        sha=sha,
        github_deployment_id=github_deployment_id,
        job_id_in_payload=job_id_in_payload,
        client_id=client_id,
    )
    if deployment is None:
        return StatusReportOutcome(deployment=None, applied=False)
    fields = []
    if github_deployment_id is not None and deployment.github_deployment_id is None:
        deployment.github_deployment_id = github_deployment_id
        fields.append("github_deployment_id")
        if deployment.downstream is None:
            deployment.downstream = downstream_make(
                system="github", id=github_deployment_id
            )
            fields.append("downstream")
    if len(sha) == FULL_SHA_LENGTH and not deployment.github_commit_sha:
        deployment.github_commit_sha = sha
        fields.append("github_commit_sha")
    if fields:
        job_save(job=deployment, fields=fields)
    if not report_applies(
        job=deployment, status=status, at=reported_at, github_status_id=github_status_id
    ):
        return StatusReportOutcome(deployment=deployment, applied=False)
    deployment.last_github_status_id = github_status_id
    job_save(job=deployment, fields=["last_github_status_id"])
    job_status_set(
        job=deployment, status=status, at=reported_at, actor=actor, detail=detail
    )
    return StatusReportOutcome(deployment=deployment, applied=True)


# A job's id as a run's name carries it (the workflow's ``run-name``).
JOB_ID_IN_NAME = re.compile(r"\b(?:dep|bld)_[0-9a-f]{24}\b")


@dataclass(frozen=True)
class RunReportOutcome:
    job: Job | None
    applied: bool


def _run_target(
    *, repository: str, run_id: int, run_name: str, client_id: int | None
) -> Job | None:
    """The job a workflow run carries, locked: the one holding the run's id as its
    downstream, else the one whose id the run's name carries and that holds no other run;
    of ``repository`` and of the source's bound client (when it has one)."""
    candidates = Job.objects.select_for_update().filter(repository=repository)
    if client_id is not None:
        candidates = candidates.filter(client_id=client_id)
    exact = (
        candidates.alias(downstream_id=KT("downstream__id"))
        .filter(
            downstream__isnull=False,
            downstream_id=str(run_id),
            downstream__system=GITHUB_ACTIONS,
        )
        .order_by("-id")
        .first()
    )
    if exact is not None:
        return exact
    named = JOB_ID_IN_NAME.search(run_name)
    if named is None:
        return None
    job = candidates.filter(public_id=named.group(0)).first()
    if job is None or job.executor != GITHUB_ACTIONS:
        return None  # a run that names a job no workflow dispatch carries
    held = job.downstream
    if held is not None and held.get("id") not in (None, run_id):
        return None  # the job's own run is another one (a run started by hand, say)
    return job


def workflow_run_report_apply(
    *,
    repository: str,
    run_id: int,
    run_name: str,
    run_url: str | None,
    status: str,
    reported_at: datetime,
    actor: str,
    detail: str = "",
    client_id: int | None = None,
) -> RunReportOutcome:
    """A workflow run's progress reported by GitHub (docs/subsystems/processing.md,
    "GitHub"), applied under ``report_applies`` to the job whose run it is (``_run_target``),
    locked until the caller's transaction ends. A job found by its id in the run's name
    keeps the run as its downstream. ``reported_at`` further ahead than
    ``WEBHOOK_TIMESTAMP_TOLERANCE_SECONDS`` counts as now plus that."""
    reported_at = _reported_at_capped(reported_at)
    job = _run_target(
        repository=repository, run_id=run_id, run_name=run_name, client_id=client_id
    )
    if job is None:
        return RunReportOutcome(job=None, applied=False)
    held = job.downstream
    if held is None or held.get("id") is None:
        job.downstream = downstream_make(system=GITHUB_ACTIONS, id=run_id, url=run_url)
        job_save(job=job, fields=["downstream"])
    if not report_applies(job=job, status=status, at=reported_at):
        return RunReportOutcome(job=job, applied=False)
    job_status_set(job=job, status=status, at=reported_at, actor=actor, detail=detail)
    return RunReportOutcome(job=job, applied=True)
