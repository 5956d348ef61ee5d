"""A local fake of GitHub's deployments REST API, served over real HTTP in the test process:
the three calls a deployment goes through, as GitHub documents them.

- ``POST /repos/{owner}/{repo}/deployments``: creates a deployment (201, its JSON; the
  ``ref`` resolved to a full commit), ``401 Bad credentials`` without the token;
- ``GET /repos/{owner}/{repo}/deployments?sha=&ref=&environment=&per_page=``: newest first,
  paged with a ``Link: <...>; rel="next"`` header;
- ``POST /repos/{owner}/{repo}/deployments/{id}/statuses``: creates a status (201) and
  keeps the ``deployment_status`` delivery GitHub would send (``deliveries``).

A fault plan per job id (``payload.deployment_id``) says what its next creates meet:
``"lose"`` (created, then the connection is closed with no answer), ``"502"`` (refused
before anything is created), ``"rate_limit"`` (403 with no request left until
``reset_in`` seconds).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from urllib.parse import urlencode

from tests.http_double import HttpDouble, Reply, Request

GITHUB_TOKEN = "ghp_test_token_0123456789abcdefABCDEF"


def github(status: int, body, headers: dict[str, str] | None = None) -> Reply:
    """An answer as GitHub's API gives one: JSON, in UTF-8."""
    return Reply(status, body, headers or {}, "application/json; charset=utf-8")


NOT_FOUND = github(404, {"message": "Not Found"})


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeApi:
    """What a fake of a GitHub API has: its server (``_serve`` answers each request), the
    calls it got, and a fault plan per job id (``plan``), taken under ``lock``."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.plans: dict[str, list[str]] = {}
        self.lock = threading.Lock()
        self.http = HttpDouble(self._serve)

    def _serve(self, request: Request) -> Reply | None:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return self.http.url

    @property
    def calls(self) -> list[tuple[str, str]]:
        """Every request's method and path (no query), in order."""
        with self.http.lock:
            return [(r.method, r.route) for r in self.http.requests]

    def __enter__(self):
        self.http.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.http.__exit__(*exc)

    def plan(self, job_id: str, *faults: str) -> None:
        with self.lock:
            self.plans.setdefault(job_id, []).extend(faults)

    def fault_next(self, job_id: str) -> str | None:
        """The fault the job's next request meets, if its plan has one left."""
        with self.lock:
            plan = self.plans.get(job_id) or []
            return plan.pop(0) if plan else None


class FakeGitHub(FakeApi):
    def __init__(self, token: str = GITHUB_TOKEN, *, reset_in: float = 1.0) -> None:
        super().__init__(token)
        self.reset_in = reset_in
        self.link_base = ""  # where the next page's Link points (default: here)
        self.lookup_delay = 0.0  # seconds each lookup page takes to answer
        # A careless API server: its 401 quotes the Authorization header it was sent.
        self.echo_credentials = False
        self.deployments: list[dict] = []
        self.statuses: list[dict] = []
        self.deliveries: list[tuple[str, bytes]] = []  # (event type, body)
        self._next_id = 9000

    def deployments_of(self, job_id: str) -> list[dict]:
        with self.lock:
            return [
                d
                for d in self.deployments
                if d["payload"].get("deployment_id") == job_id
            ]

    def add_deployment(
        self, repository: str, *, ref: str, environment: str, payload=None
    ):
        """A deployment someone else made (another tool, a person)."""
        with self.lock:
            return self._create(repository, ref, environment, payload or {})

    def status_create(self, deployment_id: int, state: str, **extra) -> bytes:
        """Creates a status (as a CD system would, through the API) and returns the
        ``deployment_status`` delivery GitHub sends for it."""
        with self.lock:
            deployment = next(d for d in self.deployments if d["id"] == deployment_id)
            return self._status(deployment, state, extra)

    # --- GitHub's side ------------------------------------------------------------------

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _create(self, repository: str, ref: str, environment: str, payload: dict):
        sha = ref if len(ref) == 40 else (ref + "0" * 40)[:40]
        deployment = {
            "id": self._id(),
            "url": f"{self.url}/repos/{repository}/deployments/{self._next_id}",
            "sha": sha,
            "ref": ref,
            "task": "deploy",
            "payload": payload,
            "environment": environment,
            "description": None,
            "created_at": _now(),
            "updated_at": _now(),
            "repository": repository,
        }
        self.deployments.append(deployment)
        return deployment

    def _status(self, deployment: dict, state: str, extra: dict) -> bytes:
        status = {
            "id": self._id(),
            "state": state,
            "description": extra.get("description", f"{state} from the fake"),
            "environment": deployment["environment"],
            "created_at": _now(),
            "updated_at": extra.get("updated_at", _now()),
        }
        self.statuses.append(status)
        owner, name = deployment["repository"].split("/")
        delivery = {
            "action": "created",
            "deployment_status": status,
            "deployment": {k: v for k, v in deployment.items() if k != "repository"},
            "repository": {
                "name": name,
                "full_name": deployment["repository"],
                "owner": {"login": owner},
            },
            "sender": {"login": "github-actions[bot]"},
        }
        body = json.dumps(delivery).encode()
        self.deliveries.append(("deployment_status", body))
        return body

    def _serve(self, request: Request) -> Reply | None:
        sent = request.headers.get("authorization")
        if sent != f"Bearer {self.token}":
            message = "Bad credentials"
            if self.echo_credentials:
                message = f"Bad credentials: {sent!r} is not a token"
            return github(401, {"message": message})
        segments = request.segments
        if segments[:1] != ["repos"] or len(segments) < 4:
            return NOT_FOUND
        repository = f"{segments[1]}/{segments[2]}"
        if request.method == "GET" and len(segments) == 4:
            if segments[3] != "deployments":
                return NOT_FOUND
            return self._deployments_list(request, repository)
        if request.method != "POST":
            return NOT_FOUND
        if len(segments) == 4 and segments[3] == "deployments":
            return self._deployment_create(repository, request.json())
        if len(segments) == 6 and segments[5] == "statuses":
            with self.lock:
                deployment = next(
                    (d for d in self.deployments if d["id"] == int(segments[4])), None
                )
                if deployment is None:
                    return NOT_FOUND
                self._status(deployment, request.json()["state"], request.json())
                return github(201, self.statuses[-1])
        return NOT_FOUND

    def _deployments_list(self, request: Request, repository: str) -> Reply:
        one = request.query
        with self.lock:
            found = [
                {k: v for k, v in d.items() if k != "repository"}
                for d in reversed(self.deployments)
                if d["repository"] == repository
                and all(
                    d[k] == one[k] for k in ("sha", "ref", "environment") if k in one
                )
            ]
        time.sleep(self.lookup_delay)
        per_page = int(one.get("per_page", 30))
        page = int(one.get("page", 1))
        chunk = found[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(found):
            following = urlencode({**one, "page": page + 1})
            base = self.link_base or self.url
            headers["Link"] = f'<{base}{request.route}?{following}>; rel="next"'
        return github(200, chunk, headers)

    def _deployment_create(self, repository: str, body: dict) -> Reply | None:
        payload = body.get("payload") or {}
        job_id = payload.get("deployment_id", "")
        fault = self.fault_next(job_id)
        if fault == "502":
            return github(502, {"message": "Server Error"})
        if fault == "rate_limit":
            reset = int(time.time() + self.reset_in) + 1
            return github(
                403,
                {"message": "API rate limit exceeded"},
                {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)},
            )
        with self.lock:
            created = self._create(
                repository, body["ref"], body["environment"], payload
            )
            created["auto_merge"] = body.get("auto_merge")
            created["required_contexts"] = body.get("required_contexts")
            answer = {k: v for k, v in created.items() if k != "repository"}
        if fault == "lose":
            return None  # created, then the connection closed with no answer
        return github(201, answer)
