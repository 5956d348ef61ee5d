"""The ``github-actions`` executor: a job becomes one run of a GitHub Actions workflow
(docs/http-api.md, "Pointing jobs at a GitHub Actions workflow"), dispatched through GitHub's
REST API at ``GITHUB_API_URL`` with ``GITHUB_TOKEN`` or the deploy target's token.

``POST /repos/<repository>/actions/workflows/<workflow>/dispatches`` with the job's ``ref``
(a build's own, else ``GITHUB_ACTIONS_REF``), ``inputs`` carrying the job's id and fields, and
``return_run_details: true``: GitHub answers the run it created (its id and page). A server
that refuses the field (GitHub Enterprise Server before it knew it: a 400 or 422 naming it) is
asked again without it within the same attempt, and is remembered as refusing it
(``_NO_RUN_DETAILS``, per API URL, by each worker process); GitHub then answers 204 and the
run is known once its first ``workflow_run`` delivery names the job.

Exactly once: the workflow's ``run-name`` carries the job's id (the documented workflow file).
After an attempt that may have dispatched without our knowing (an answer lost, a timeout, a
5xx, a worker lost mid-call), the next attempt first looks for its run
(``GET .../actions/workflows/<workflow>/runs?event=workflow_dispatch&created=>=...``, every
page, matched on the job's id in the run's name) and dispatches again only when none exists.
GitHub's ``workflow_run`` deliveries then move the job
(``deployments.services.reports.workflow_run_report_apply``).
"""

from __future__ import annotations

import json
import re
import threading
from datetime import timedelta
from urllib.parse import quote

import httpx
from django.conf import settings

from . import outbound
from .downstream import GITHUB_ACTIONS as SYSTEM
from .downstream import downstream_make
from .executors import TriggerCall, TriggerResult
from .github import (
    GitHubApiExecutor,
    github_headers,
    github_message,
    json_parsed,
    lookup_pages,
)
from .models import Job, TriggerAttempt
from .naming import repository_is_valid
from .triggers import result_of

Outcome = TriggerAttempt.Outcome
# A workflow as the API names it: its file name (deploy.yml) or its numeric id.
WORKFLOW = re.compile(r"[A-Za-z0-9_.-]{1,100}\.ya?ml|[0-9]{1,20}")
# A branch or tag name, as a dispatch's ``ref`` takes it: printable, no spaces, no "..".
REF = re.compile(r"(?!.*\.\.)[A-Za-z0-9._/-]{1,255}")
# Runs created this long before the job count when its run is looked for (clocks differ).
LOOKUP_SLACK = timedelta(minutes=5)
RUN_DETAILS_FIELD = "return_run_details"

# The API URLs whose server refused ``return_run_details``, as this process learnt.
_NO_RUN_DETAILS: set[str] = set()
_NO_RUN_DETAILS_LOCK = threading.Lock()


def job_inputs(job: Job) -> dict[str, str]:
    """The workflow's ``inputs``: the job's id under its kind's name and its fields, all
    text (GitHub's inputs are strings); the workflow declares exactly these."""
    if job.kind == "deployment":
        return {
            "deployment_id": job.public_id,
            "repository": job.repository,
            "commit_sha": job.commit_sha,
            "environment": job.environment,
            "triggered_by": job.triggered_by,
        }
    return {
        "build_id": job.public_id,
        "repository": job.repository,
        "commit_sha": job.commit_sha,
        "ref": job.ref,
        "triggered_by": job.triggered_by,
    }


def job_ref(job: Job) -> str:
    """The ref the workflow runs on: a build's own ``ref`` when it has one, else
    ``GITHUB_ACTIONS_REF`` (the workflow checks out ``inputs.commit_sha``)."""
    return job.ref or settings.GITHUB_ACTIONS_REF


def run_names_job(run: dict, public_id: str) -> bool:
    """Whether a run's name (its ``run-name``, GitHub's ``name`` or ``display_title``)
    carries the job's id."""
    return any(
        isinstance(run.get(key), str) and public_id in run[key]
        for key in ("name", "display_title")
    )


def _run_delivered(run: dict, *, url: str, status_code: int) -> TriggerResult:
    return TriggerResult(
        outcome=Outcome.DELIVERED,
        status_code=status_code,
        url=url,
        downstream=downstream_make(
            system=SYSTEM, id=run.get("id"), url=run.get("html_url")
        ),
    )


class GitHubActionsExecutor(GitHubApiExecutor):
    name = SYSTEM

    def _trigger(self, call: TriggerCall) -> TriggerResult:
        job = call.job
        refused = self._refused(job)
        if refused:
            return TriggerResult(outcome=Outcome.REJECTED, error=refused)
        owner, name = (quote(part, safe="") for part in job.repository.split("/"))
        api = call.url.rstrip("/")
        workflow = f"{api}/repos/{owner}/{name}/actions/workflows/{job.workflow}"
        headers = github_headers(call.secret)
        client = outbound.http_client()
        endpoint = f"{workflow}/dispatches"
        try:
            if call.look_up_first:
                found = self._find(
                    client, f"{workflow}/runs", headers, job, call.secret
                )
                if isinstance(found, TriggerResult):
                    return found
                if found is not None:
                    return _run_delivered(
                        found, url=f"{workflow}/runs", status_code=200
                    )
            return self._dispatch(client, endpoint, headers, job, api, call.secret)
        except Exception as exc:  # classified: every failure of the call is an outcome
            return result_of(url=endpoint, error=exc, secrets=[call.secret])

    @staticmethod
    def _refused(job: Job) -> str:
        """Why the job cannot be dispatched at all (no request is sent), or ``""``."""
        if not repository_is_valid(job.repository):
            return "the repository is not a GitHub owner/name"
        if not WORKFLOW.fullmatch(job.workflow):
            return (
                "the job names no workflow file (deploy.yml) or id: the "
                "github-actions executor dispatches the job's workflow"
            )
        if not REF.fullmatch(job_ref(job)):
            return "the ref is not a branch or tag name GitHub takes"
        return ""

    def _dispatch(
        self,
        client: httpx.Client,
        endpoint: str,
        headers: dict[str, str],
        job: Job,
        api: str,
        token: str,
    ) -> TriggerResult:
        body: dict = {"ref": job_ref(job), "inputs": job_inputs(job)}
        with _NO_RUN_DETAILS_LOCK:
            details = api not in _NO_RUN_DETAILS
        if details:
            body[RUN_DETAILS_FIELD] = True
        answer = self._post(client, endpoint, headers, body)
        if details and _refuses_run_details(answer):
            # A server that does not know the field refused the whole call: nothing was
            # dispatched. The same call without it, now and from now on.
            with _NO_RUN_DETAILS_LOCK:
                _NO_RUN_DETAILS.add(api)
            del body[RUN_DETAILS_FIELD]
            answer = self._post(client, endpoint, headers, body)
        result = result_of(url=endpoint, answer=answer, secrets=[token])
        if result.outcome != Outcome.DELIVERED:
            return TriggerResult(
                **{**result.__dict__, "error": github_message(answer.body)}
            )
        run = json_parsed(answer.body)
        if not isinstance(run, dict):
            # 204: dispatched; the run is known by its first workflow_run delivery.
            return result
        return TriggerResult(
            **{
                **result.__dict__,
                "downstream": downstream_make(
                    system=SYSTEM,
                    id=run.get("workflow_run_id"),
                    url=run.get("html_url"),
                ),
            }
        )

    @staticmethod
    def _post(
        client: httpx.Client, endpoint: str, headers: dict[str, str], body: dict
    ) -> outbound.Answer:
        return outbound.call(
            client,
            "POST",
            endpoint,
            headers={**headers, "Content-Type": "application/json"},
            content=json.dumps(body).encode(),
            read_body=True,
        )

    @staticmethod
    def _find(
        client: httpx.Client,
        endpoint: str,
        headers: dict[str, str],
        job: Job,
        token: str,
    ) -> dict | TriggerResult | None:
        """The workflow_dispatch run whose name carries the job's id, created since the
        job was (less ``LOOKUP_SLACK``), if one exists; a ``TriggerResult`` when the lookup
        itself did not succeed."""
        since = (job.created_at - LOOKUP_SLACK).strftime("%Y-%m-%dT%H:%M:%SZ")
        params = {
            "event": "workflow_dispatch",
            "created": f">={since}",
            "per_page": "100",
        }
        for page in lookup_pages(
            client,
            endpoint,
            headers=headers,
            params=params,
            token=token,
            items="workflow_runs",
        ):
            if isinstance(page, TriggerResult):
                return page
            for run in page:
                if (
                    isinstance(run, dict)
                    and isinstance(run.get("id"), int)
                    and run_names_job(run, job.public_id)
                ):
                    return run
        return None


def _refuses_run_details(answer: outbound.Answer) -> bool:
    """A 400 or 422 whose message names ``return_run_details``: the server does not take
    the field (and dispatched nothing)."""
    return (
        answer.status_code in (400, 422) and RUN_DETAILS_FIELD.encode() in answer.body
    )


GITHUB_ACTIONS = GitHubActionsExecutor()
