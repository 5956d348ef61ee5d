"""The ``github`` executor: a job becomes one GitHub deployment (docs/http-api.md,
"Executors"), created through GitHub's REST API at ``GITHUB_API_URL`` (GitHub Enterprise, or a
test server) with ``GITHUB_TOKEN`` or the deploy target's token.

``POST /repos/<repository>/deployments`` carries the job's id in ``payload.deployment_id``.
After an attempt that may have created one without our knowing (an answer lost, a timeout,
a 5xx, a worker lost mid-call), the next attempt first looks for its own
(``GET /repos/<repository>/deployments?sha=...&environment=...``, matched on
``payload.deployment_id``), so a job never creates two. GitHub's ``deployment_status``
deliveries then move the job that holds the GitHub deployment's id
(``deployments.services.reports.deployment_status_report_apply``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from django.conf import settings

from . import outbound
from .downstream import downstream_make
from .executors import TriggerCall, TriggerExecutor, TriggerResult
from .models import Job, TriggerAttempt
from .naming import repository_is_valid
from .triggers import result_of

Outcome = TriggerAttempt.Outcome
API_VERSION = "2022-11-28"
FULL_SHA = re.compile(r"[0-9a-f]{40}")
# Pages of 100 deployments read when looking for the job's own, newest first.
LOOKUP_MAX_PAGES = 10


def github_headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": API_VERSION,
    }


def json_parsed(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def github_message(body: bytes) -> str:
    """GitHub's own one-line reason (``{"message": ...}``), never the rest of a body."""
    parsed = json_parsed(body)
    if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
        return parsed["message"][:200]
    return ""


def _payload_job_id(deployment: dict) -> str:
    payload = deployment.get("payload")
    if isinstance(payload, str):  # older deployments carry the payload as a string
        payload = json_parsed(payload.encode())
    if isinstance(payload, dict):
        value = payload.get("deployment_id")
        return value if isinstance(value, str) else ""
    return ""


def _delivered(found: dict, *, url: str, status_code: int) -> TriggerResult:
    sha = str(found.get("sha") or "").lower()
    return TriggerResult(
        outcome=Outcome.DELIVERED,
        status_code=status_code,
        url=url,
        github_deployment_id=int(found["id"]),
        github_commit_sha=sha if FULL_SHA.fullmatch(sha) else "",
        # GitHub's deployments have no page of their own: the link is the API's.
        downstream=downstream_make(
            system="github", id=int(found["id"]), url=found.get("url")
        ),
    )


class GitHubApiExecutor(TriggerExecutor):
    """What the executors that call GitHub's REST API share: ``GITHUB_API_URL`` and
    ``GITHUB_TOKEN`` (or the target's), and one attempt (a lookup when it comes first, then
    the call that makes something) within one deadline (``outbound.attempt_deadline``)."""

    def default_url(self) -> str:
        return settings.GITHUB_API_URL

    def default_secret(self) -> str:
        return settings.GITHUB_TOKEN

    def config_errors(self, *, url: str, secret: str) -> dict[str, list[str]]:
        if secret or self.default_secret():
            return {}
        return {"secret": ["A GitHub token is required (or GITHUB_TOKEN)."]}

    def trigger(self, call: TriggerCall) -> TriggerResult:
        with outbound.attempt_deadline():
            return self._trigger(call)

    def _trigger(self, call: TriggerCall) -> TriggerResult:
        raise NotImplementedError


class GitHubExecutor(GitHubApiExecutor):
    name = "github"
    kinds = frozenset({"deployment"})

    def _trigger(self, call: TriggerCall) -> TriggerResult:
        job = call.job
        if call.kind not in self.kinds:
            return TriggerResult(
                outcome=Outcome.REJECTED,
                error="the github executor creates deployments; a build is not one",
            )
        if not repository_is_valid(job.repository):
            # A row from before the API held repositories to GitHub's naming: a ``..``
            # part would move the token's request to another API path. No request.
            return TriggerResult(
                outcome=Outcome.REJECTED,
                error="the repository is not a GitHub owner/name",
            )
        owner, name = (quote(part, safe="") for part in job.repository.split("/"))
        endpoint = f"{call.url.rstrip('/')}/repos/{owner}/{name}/deployments"
        headers = github_headers(call.secret)
        client = outbound.http_client()
        try:
            if call.look_up_first:
                found = self._find(client, endpoint, headers, job, call.secret)
                if isinstance(found, TriggerResult):
                    return found
                if found is not None:
                    return _delivered(found, url=endpoint, status_code=200)
            answer = outbound.call(
                client,
                "POST",
                endpoint,
                headers={**headers, "Content-Type": "application/json"},
                content=self._create_body(job),
                read_body=True,
            )
        except Exception as exc:  # classified: every failure of the call is an outcome
            return result_of(url=endpoint, error=exc, secrets=[call.secret])
        result = result_of(url=endpoint, answer=answer, secrets=[call.secret])
        if result.outcome != Outcome.DELIVERED:
            message = github_message(answer.body)
            return TriggerResult(**{**result.__dict__, "error": message})
        created = json_parsed(answer.body)
        if not isinstance(created, dict) or not isinstance(created.get("id"), int):
            # Not GitHub's answer to a create: it may have created one all the same.
            return TriggerResult(
                outcome=Outcome.AMBIGUOUS,
                status_code=answer.status_code,
                url=endpoint,
                error="a 2xx without a deployment id",
            )
        return _delivered(created, url=endpoint, status_code=answer.status_code)

    @staticmethod
    def _create_body(job: Job) -> bytes:
        return json.dumps(
            {
                "ref": job.commit_sha,
                "environment": job.environment,
                "auto_merge": False,
                "required_contexts": [],
                "payload": {"deployment_id": job.public_id},
                "description": f"{job.public_id} ({job.triggered_by or 'api'})"[:140],
            }
        ).encode()

    @staticmethod
    def _find(
        client: httpx.Client,
        endpoint: str,
        headers: dict[str, str],
        job: Job,
        token: str,
    ) -> dict | TriggerResult | None:
        """The GitHub deployment whose payload names the job, if one exists; a
        ``TriggerResult`` when the lookup itself did not succeed. A full commit is looked up
        by ``sha``; a short one by ``ref``, which is what the job created it with."""
        commit = job.commit_sha
        params = {
            "environment": job.environment,
            "per_page": "100",
            ("sha" if FULL_SHA.fullmatch(commit) else "ref"): commit,
        }
        for page in lookup_pages(
            client, endpoint, headers=headers, params=params, token=token
        ):
            if isinstance(page, TriggerResult):
                return page
            for deployment in page:
                if (
                    isinstance(deployment, dict)
                    and isinstance(deployment.get("id"), int)
                    and _payload_job_id(deployment) == job.public_id
                ):
                    return deployment
        return None


def lookup_pages(
    client: httpx.Client,
    endpoint: str,
    *,
    headers: dict[str, str],
    params: dict[str, str],
    token: str,
    items: str = "",
) -> Iterator[list | TriggerResult]:
    """The pages of a GitHub list, newest first, each as its list (under the key ``items``
    of an object, for lists GitHub wraps: ``workflow_runs``), at most ``LOOKUP_MAX_PAGES``;
    a ``TriggerResult`` (then nothing more) when a page cannot be read. The token goes to
    the API's own host only, whatever a ``Link`` header says."""
    url: str | None = endpoint
    for _ in range(LOOKUP_MAX_PAGES):
        if url is None:
            return
        answer = outbound.call(
            client,
            "GET",
            url,
            headers=headers,
            params=params if url == endpoint else None,
            read_body=True,
        )
        if answer.status_code != 200:
            result = result_of(url=endpoint, answer=answer, secrets=[token])
            yield TriggerResult(
                **{**result.__dict__, "error": github_message(answer.body)}
            )
            return
        listed = json_parsed(answer.body)
        if items and isinstance(listed, dict):
            listed = listed.get(items)
        if not isinstance(listed, list):
            yield TriggerResult(
                outcome=Outcome.AMBIGUOUS,
                status_code=answer.status_code,
                url=endpoint,
                error="the lookup did not answer a list",
            )
            return
        yield listed
        url = (
            httpx.Response(200, headers=answer.headers).links.get("next", {}).get("url")
        )
        if url is not None and urlsplit(url)[:2] != urlsplit(endpoint)[:2]:
            yield TriggerResult(
                outcome=Outcome.AMBIGUOUS,
                status_code=answer.status_code,
                url=endpoint,
                error="the next page of the lookup is on another host",
            )
            return


GITHUB = GitHubExecutor()
