"""A local fake of GitHub's Actions REST API, served over real HTTP in the test process: the
two calls a ``github-actions`` job goes through, as GitHub documents them, and the
``workflow_run`` deliveries GitHub sends as the run moves.

- ``POST /repos/{owner}/{repo}/actions/workflows/{workflow}/dispatches``: ``ref``, ``inputs``
  (only those the workflow declares: any other is 422 "Unexpected inputs provided"), and
  ``return_run_details``: with it true, 200 and ``{"workflow_run_id", "run_url",
  "html_url"}``; without, 204. A server ``like_ghes`` (GitHub Enterprise Server before the
  field) refuses the field with a 400 naming it and creates nothing. The run's name is the
  workflow's ``run-name`` with the inputs put in (``RUN_NAME``);
- ``GET /repos/{owner}/{repo}/actions/workflows/{workflow}/runs?event=&created=>=&per_page=``:
  ``{"total_count", "workflow_runs"}``, newest first, paged with a ``Link`` header;
- ``GET /rate_limit``: the token's limits (what a target's test trigger checks).

A fault plan per job id (the ``deployment_id`` or ``build_id`` input) says what its next
dispatches meet: ``"lose"`` (the run is created, then the connection is closed with no
answer), ``"502"`` (refused before anything is created).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from urllib.parse import urlencode

from tests.deployments.fake_github import GITHUB_TOKEN, NOT_FOUND, FakeApi, github
from tests.http_double import Reply, Request

# The workflow file the docs give a user (docs/http-api.md): its inputs and its run-name.
DEPLOY_INPUTS = frozenset(
    {"deployment_id", "repository", "commit_sha", "environment", "triggered_by"}
)
BUILD_INPUTS = frozenset(
    {"build_id", "repository", "commit_sha", "ref", "triggered_by"}
)
RUN_NAME = "Deploy {job_id} ({environment})"


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeGitHubActions(FakeApi):
    def __init__(self, token: str = GITHUB_TOKEN, *, like_ghes: bool = False) -> None:
        super().__init__(token)
        self.like_ghes = like_ghes
        self.runs: list[dict] = []
        self.dispatches: list[dict] = []  # every dispatch body it took (and acted on)
        self._next_id = 7_000_000_000

    def bodies(self, method: str = "POST") -> list[dict]:
        with self.http.lock:
            return [r.json() for r in self.http.requests if r.method == method]

    def runs_of(self, job_id: str) -> list[dict]:
        with self.lock:
            return [run for run in self.runs if job_id in run["name"]]

    def add_run(self, repository: str, workflow: str, name: str) -> dict:
        """A run someone else started (by hand, another tool)."""
        with self.lock:
            return self._run_create(repository, workflow, "main", name)

    def delivery(
        self,
        run: dict,
        action: str,
        *,
        conclusion: str | None = None,
        updated_at: datetime | None = None,
        run_attempt: int = 1,
    ) -> bytes:
        """The ``workflow_run`` delivery GitHub sends as ``run`` moves: ``requested``,
        ``in_progress``, ``completed`` (with its ``conclusion``), shaped as GitHub's."""
        status = {"requested": "queued", "in_progress": "in_progress"}.get(
            action, "completed"
        )
        moved = {
            **run,
            "status": status,
            "conclusion": conclusion if action == "completed" else None,
            "updated_at": _stamp(updated_at or datetime.now(UTC)),
            "run_attempt": run_attempt,
        }
        owner = moved["repository"]["owner"]["login"]
        payload = {
            "action": action,
            "workflow_run": moved,
            "workflow": {
                "id": moved["workflow_id"],
                "name": "Deploy",
                "path": moved["path"],
                "state": "active",
            },
            "repository": moved["repository"],
            "organization": {"login": owner},
            "sender": {"login": "octocat", "type": "User"},
        }
        return json.dumps(payload).encode()

    # --- GitHub's side ------------------------------------------------------------------

    def _run_create(self, repository: str, workflow: str, ref: str, name: str) -> dict:
        self._next_id += 1
        run_id = self._next_id
        now = _stamp(datetime.now(UTC))
        owner, repo = repository.split("/")
        run = {
            "id": run_id,
            "name": name,
            "display_title": name,
            "node_id": f"WFR_{run_id}",
            "head_branch": ref,
            "head_sha": "5f1c2e3d4b5a69788796a5b4c3d2e1f0a9b8c7d6",
            "path": f".github/workflows/{workflow}",
            "run_number": len(self.runs) + 1,
            "run_attempt": 1,
            "event": "workflow_dispatch",
            "status": "queued",
            "conclusion": None,
            "workflow_id": 161335,
            "url": f"{self.url}/repos/{repository}/actions/runs/{run_id}",
            "html_url": f"https://github.example/{repository}/actions/runs/{run_id}",
            "created_at": now,
            "updated_at": now,
            "run_started_at": now,
            "repository": {
                "id": 1296269,
                "name": repo,
                "full_name": repository,
                "owner": {"login": owner},
            },
        }
        self.runs.append(run)
        return run

    def _serve(self, request: Request) -> Reply | None:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return github(401, {"message": "Bad credentials"})
        segments = request.segments
        if request.method == "GET" and segments == ["rate_limit"]:
            # What "Send test trigger" asks of a github-actions target: is the token good.
            core = {"limit": 5000, "remaining": 4999, "reset": 0, "used": 1}
            return github(200, {"resources": {"core": core}, "rate": core})
        # repos/{owner}/{repo}/actions/workflows/{workflow}/{dispatches|runs}
        if (
            len(segments) != 7
            or segments[0] != "repos"
            or segments[3:5] != ["actions", "workflows"]
        ):
            return NOT_FOUND
        repository = f"{segments[1]}/{segments[2]}"
        workflow, call = segments[5], segments[6]
        if request.method == "POST" and call == "dispatches":
            return self._dispatch(repository, workflow, request.json())
        if request.method == "GET" and call == "runs":
            return self._runs_list(request, repository, workflow)
        return NOT_FOUND

    def _dispatch(self, repository: str, workflow: str, body: dict) -> Reply | None:
        if "return_run_details" in body and self.like_ghes:
            return github(
                400,
                {
                    "message": 'Invalid request.\n\n"return_run_details" is not a '
                    "permitted key.",
                    "documentation_url": "https://docs.github.com/enterprise-server"
                    "@3.20/rest/actions/workflows#create-a-workflow-dispatch-event",
                },
            )
        inputs = body.get("inputs") or {}
        declared = DEPLOY_INPUTS if "deployment_id" in inputs else BUILD_INPUTS
        unexpected = sorted(set(inputs) - declared)
        if unexpected or not isinstance(body.get("ref"), str):
            return github(422, {"message": f"Unexpected inputs provided: {unexpected}"})
        job_id = inputs.get("deployment_id") or inputs.get("build_id") or ""
        fault = self.fault_next(job_id)
        if fault == "502":
            return github(502, {"message": "Server Error"})
        name = RUN_NAME.format(
            job_id=job_id, environment=inputs.get("environment") or inputs.get("ref")
        )
        with self.lock:
            run = self._run_create(repository, workflow, body["ref"], name)
            self.dispatches.append(body)
        if fault == "lose":
            return None  # dispatched, then the connection closed with no answer
        if body.get("return_run_details") is True:
            return github(
                200,
                {
                    "workflow_run_id": run["id"],
                    "run_url": run["url"],
                    "html_url": run["html_url"],
                },
            )
        return Reply(204, b"", content_type="")

    def _runs_list(self, request: Request, repository: str, workflow: str) -> Reply:
        query = request.query
        since = query.get("created", "").removeprefix(">=")
        with self.lock:
            found = [
                dict(run)
                for run in reversed(self.runs)
                if run["repository"]["full_name"] == repository
                and run["path"].endswith(f"/{workflow}")
                and run["event"] == query.get("event", run["event"])
                and (not since or run["created_at"] >= since)
            ]
        per_page = int(query.get("per_page", 30))
        page = int(query.get("page", 1))
        chunk = found[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(found):
            following = urlencode({**query, "page": page + 1})
            headers["Link"] = f'<{self.url}{request.route}?{following}>; rel="next"'
        return github(200, {"total_count": len(found), "workflow_runs": chunk}, headers)
