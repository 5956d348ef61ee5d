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

import contextlib
import json
import socket
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.deployments.receiver import QuietServer

GITHUB_TOKEN = "ghp_test_token_0123456789abcdefABCDEF"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeGitHub:
    def __init__(self, token: str = GITHUB_TOKEN, *, reset_in: float = 1.0) -> None:
        self.token = token
        self.reset_in = reset_in
        self.link_base = ""  # where the next page's Link points (default: here)
        self.lookup_delay = 0.0  # seconds each lookup page takes to answer
        # A careless API server: its 401 quotes the Authorization header it was sent.
        self.echo_credentials = False
        self.deployments: list[dict] = []
        self.statuses: list[dict] = []
        self.deliveries: list[tuple[str, bytes]] = []  # (event type, body)
        self.calls: list[tuple[str, str]] = []  # (method, path)
        self.plans: dict[str, list[str]] = {}
        self.lock = threading.Lock()
        self._next_id = 9000
        self.server = QuietServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeGitHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def plan(self, job_id: str, *faults: str) -> None:
        with self.lock:
            self.plans.setdefault(job_id, []).extend(faults)

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

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):
                pass

            def _reply(self, status: int, body, headers=None):
                payload = json.dumps(body).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _authorized(self) -> bool:
                sent = self.headers.get("Authorization")
                if sent == f"Bearer {fake.token}":
                    return True
                message = "Bad credentials"
                if fake.echo_credentials:
                    message = f"Bad credentials: {sent!r} is not a token"
                self._reply(401, {"message": message})
                return False

            def _route(self) -> tuple[str, list[str], dict]:
                parts = urlsplit(self.path)
                with fake.lock:
                    fake.calls.append((self.command, parts.path))
                return (
                    parts.path,
                    parts.path.strip("/").split("/"),
                    parse_qs(parts.query),
                )

            def do_GET(self):
                path, segments, query = self._route()
                if not self._authorized():
                    return
                if (
                    len(segments) != 4
                    or segments[0] != "repos"
                    or segments[3] != "deployments"
                ):
                    return self._reply(404, {"message": "Not Found"})
                repository = f"{segments[1]}/{segments[2]}"
                one = {k: v[0] for k, v in query.items()}
                with fake.lock:
                    found = [
                        {k: v for k, v in d.items() if k != "repository"}
                        for d in reversed(fake.deployments)
                        if d["repository"] == repository
                        and ("sha" not in one or d["sha"] == one["sha"])
                        and ("ref" not in one or d["ref"] == one["ref"])
                        and (
                            "environment" not in one
                            or d["environment"] == one["environment"]
                        )
                    ]
                time.sleep(fake.lookup_delay)
                per_page = int(one.get("per_page", 30))
                page = int(one.get("page", 1))
                chunk = found[(page - 1) * per_page : page * per_page]
                headers = {}
                if page * per_page < len(found):
                    following = urlencode({**one, "page": page + 1})
                    base = fake.link_base or fake.url
                    headers["Link"] = f'<{base}{path}?{following}>; rel="next"'
                return self._reply(200, chunk, headers)

            def do_POST(self):
                _, segments, _ = self._route()
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self._authorized():
                    return
                if segments[:1] != ["repos"] or len(segments) < 4:
                    return self._reply(404, {"message": "Not Found"})
                repository = f"{segments[1]}/{segments[2]}"
                if len(segments) == 4 and segments[3] == "deployments":
                    return self._deployment_create(repository, body)
                if len(segments) == 6 and segments[5] == "statuses":
                    with fake.lock:
                        deployment = next(
                            (
                                d
                                for d in fake.deployments
                                if d["id"] == int(segments[4])
                            ),
                            None,
                        )
                        if deployment is None:
                            return self._reply(404, {"message": "Not Found"})
                        fake._status(deployment, body["state"], body)
                        status = fake.statuses[-1]
                    return self._reply(201, status)
                return self._reply(404, {"message": "Not Found"})

            def _deployment_create(self, repository: str, body: dict):
                payload = body.get("payload") or {}
                job_id = payload.get("deployment_id", "")
                with fake.lock:
                    plan = fake.plans.get(job_id) or []
                    fault = plan.pop(0) if plan else None
                if fault == "502":
                    return self._reply(502, {"message": "Server Error"})
                if fault == "rate_limit":
                    reset = int(time.time() + fake.reset_in) + 1
                    return self._reply(
                        403,
                        {"message": "API rate limit exceeded"},
                        {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)},
                    )
                with fake.lock:
                    created = fake._create(
                        repository, body["ref"], body["environment"], payload
                    )
                    created["auto_merge"] = body.get("auto_merge")
                    created["required_contexts"] = body.get("required_contexts")
                    answer = {k: v for k, v in created.items() if k != "repository"}
                if fault == "lose":
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return None
                return self._reply(201, answer)

        return Handler
