"""API client roles (docs/http-api.md, "Roles"): every endpoint answers only the roles it
names, 403 ``forbidden`` to the others (nothing recorded), 401 without a token; a client
made before roles is ``ci`` and keeps what it could do; a role is set by an operator at a
shell or the console and recorded, never through the API."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver

from core.actors import Actor
from core.models import ApiClient, ApiRole
from deployments.models import Deployment
from idempotency.models import IdempotencyRecord
from tests.core.factories import api_client_make, bearer_http, role_http
from tests.deployments.factories import deployment_body, idempotent_post
from trail.api_clients import api_client_set_role
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

ROLES = [role.value for role in ApiRole]


def api_views():
    """(route, view class) of every DRF view under /api/ (but the schema's own)."""
    found = []

    def walk(patterns, prefix):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                view = getattr(pattern.callback, "cls", None)
                route = prefix + str(pattern.pattern)
                if view is not None and route.startswith("api/"):
                    found.append((route, view))

    walk(get_resolver().url_patterns, "")
    return found


def test_every_api_view_names_its_roles():
    views = api_views()
    assert len(views) > 20
    for route, view in views:
        if route.startswith(("api/schema/", "api/docs/")):
            continue
        roles = set(getattr(view, "read_roles", ())) | set(
            getattr(view, "write_roles", ())
        )
        assert roles, f"{route} ({view.__name__}) names no role: closed to everyone"
        assert roles <= set(ROLES), route


@pytest.mark.parametrize("role", ROLES)
def test_whoami_answers_every_role_with_its_role(role):
    response = role_http(role).get("/api/whoami/")
    assert response.status_code == 200
    assert response.json()["role"] == role


@pytest.mark.parametrize(
    ("role", "allowed"),
    [("ci", True), ("producer", False), ("operator", False), ("auditor", False)],
)
def test_only_ci_triggers_and_a_refused_trigger_records_nothing(role, allowed):
    http = role_http(role)
    response = idempotent_post(http, "/api/deployments/", deployment_body())
    if allowed:
        assert response.status_code == 202
        assert Deployment.objects.count() == 1
        return
    assert response.status_code == 403
    assert response.json() == {"error": "forbidden"}
    assert Deployment.objects.count() == 0
    assert IdempotencyRecord.objects.count() == 0
    # The key's lookup and the status report are the CI role's too.
    assert http.get("/api/idempotency-keys/deployment.create/key-1/").status_code == 403
    report = idempotent_post(
        http,
        "/api/status-sync/",
        {
            "deployment_id": "dep_x",
            "status": "running",
            "reported_at": "2026-01-01T00:00:00Z",
        },
    )
    assert report.status_code == 403


def test_the_fast_lane_refuses_a_role_as_the_whole_way_does():
    # A body the fast lane accepts, from an operator: it must not slip past the roles.
    http = role_http("operator")
    for _ in range(2):
        response = http.post(
            "/api/deployments/",
            data=json.dumps(deployment_body()),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY="fast-1",
        )
        assert response.status_code == 403
    assert Deployment.objects.count() == 0


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_documents_and_event_status(role):
    http = role_http(role)
    assert http.get("/api/research/documents/").status_code == 200
    assert http.get("/api/webhooks/nowhere/events/e-1/").status_code == 404


@pytest.mark.parametrize("role", ["ci", "producer"])
def test_the_operator_api_refuses_ci_and_producers(role):
    http = role_http(role)
    assert http.get("/api/ops/sources/").status_code == 403
    assert http.get("/api/ops/dead-letters/").status_code == 403


def test_no_token_is_401_everywhere(client):
    for route in ("/api/ops/sources/", "/api/deployments/", "/api/whoami/"):
        response = client.get(route)
        assert response.status_code == 401
        assert response.json() == {"error": "unauthorized"}


def test_a_client_is_ci_unless_told_and_the_command_sets_a_role(capsys):
    client, _ = api_client_make()
    assert client.role == "ci"
    call_command("api_client", "create", "ops-bot", "--role", "operator")
    created = ApiClient.objects.get(name="ops-bot")
    assert created.role == "operator"
    action = OperatorAction.objects.get(
        action="create_api_client", details__client="ops-bot"
    )
    assert action.details["role"] == "operator"

    call_command("api_client", "set-role", "ops-bot", "auditor")
    created.refresh_from_db()
    assert created.role == "auditor"
    changed = OperatorAction.objects.get(action="set_api_client_role")
    assert changed.details == {
        "client": "ops-bot",
        "client_id": created.pk,
        "before": "operator",
        "after": "auditor",
    }
    assert changed.actor_name.startswith("os:")
    # The same role again changes and records nothing.
    assert not api_client_set_role(client=created, role="auditor", actor=Actor.system())
    assert OperatorAction.objects.filter(action="set_api_client_role").count() == 1


def test_a_role_change_takes_effect_for_the_token(settings):
    settings.API_CLIENT_CACHE_SECONDS = 0
    client, token = api_client_make(role="auditor")
    http = bearer_http(token)
    assert http.get("/api/ops/sources/").status_code == 200
    api_client_set_role(client=client, role="producer", actor=Actor.system())
    assert http.get("/api/ops/sources/").status_code == 403
