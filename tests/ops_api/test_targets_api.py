"""Deploy targets through the operator API (/api/ops/deploy-targets/): operators create,
change and disable them, auditors read them, every other role is refused; each change is the
admin's operator action with the API client as actor; the secret and the URL's query are
never answered nor kept in the key's record; bad input is 422, never a 5xx."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from deployments.models import BreakerState, DeployTarget, secret_fingerprint
from idempotency.models import IdempotencyRecord
from ops import target_apis
from tests.core.factories import api_client_make, bearer_http, role_http
from tests.deployments.factories import idempotent_post as post
from tests.deployments.receiver import RECEIVER_SECRET
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db

TARGETS = "/api/ops/deploy-targets/"
URL = "https://ci.internal.example/hooks/deploy?token=jenkins-token"
SHOWN_URL = "https://ci.internal.example/hooks/deploy"
OTHER_SECRET = "whsec_YW5vdGhlciByZWNlaXZlcidzIGtleSwgMzIgYnl0ZXM="


def operator(name: str | None = None):
    """An operator API client and its DRF test client."""
    client, token = api_client_make(name=name, role="operator")
    return client, bearer_http(token)


def target_body(**overrides) -> dict:
    body = {
        "name": "shop-prod",
        "repository_pattern": "acme/*",
        "environment_pattern": "prod*",
        "applies_to": "deployments",
        "priority": 10,
        "executor": "http",
        "url": URL,
        "secret": RECEIVER_SECRET,
        "clients": [],
        "is_enabled": True,
        "max_in_flight": 3,
    }
    body.update(overrides)
    return body


def target_create(http, key: str = "create-1", **overrides):
    return post(http, TARGETS, target_body(**overrides), key=key)


def patch(http, target_id: int, body) -> object:
    return http.patch(
        f"{TARGETS}{target_id}/", data=json.dumps(body), content_type="application/json"
    )


def disable(http, target_id: int, key: str = "disable-1", reason: str = "noisy"):
    return post(http, f"{TARGETS}{target_id}/disable/", {"reason": reason}, key=key)


def target_actions():
    """The operator actions on deploy targets (creating an API client is one too)."""
    return OperatorAction.objects.filter(
        action__in=[
            OperatorAction.Action.CREATE_DEPLOY_TARGET,
            OperatorAction.Action.CHANGE_DEPLOY_TARGET,
        ]
    )


def assert_no_secret(response) -> None:
    text = response.content.decode()
    assert RECEIVER_SECRET not in text
    assert OTHER_SECRET not in text
    assert "jenkins-token" not in text


# --- roles -----------------------------------------------------------------------------


def role_requests(http, target_id: int) -> dict[str, object]:
    return {
        "list": http.get(TARGETS),
        "read": http.get(f"{TARGETS}{target_id}/"),
        "create": target_create(http, key="role-create", name="role-made"),
        "change": patch(http, target_id, {"priority": 7}),
        "disable": disable(http, target_id, key="role-disable"),
    }


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        ("operator", {"list", "read", "create", "change", "disable"}),
        ("auditor", {"list", "read"}),
        ("ci", set()),
        ("producer", set()),
    ],
)
def test_each_role_may_do_what_its_role_allows(role, allowed):
    _, http = operator()
    target_id = target_create(http).json()["id"]
    caller = role_http(role)
    actions_before = target_actions().count()

    answers = role_requests(caller, target_id)

    for name, response in answers.items():
        if name in allowed:
            assert response.status_code in (200, 201), (name, response.content)
        else:
            assert response.status_code == 403, (name, response.content)
            assert response.json() == {"error": "forbidden"}
    if role != "operator":
        # Refused: nothing changed, nothing recorded, no key kept.
        assert target_actions().count() == actions_before
        assert not DeployTarget.objects.filter(name="role-made").exists()
        assert DeployTarget.objects.get(pk=target_id).is_enabled
        assert IdempotencyRecord.objects.count() == 1  # the set-up's own key


def test_without_a_token_every_endpoint_is_401():
    _, http = operator()
    target_id = target_create(http).json()["id"]
    answers = role_requests(bearer_http("not-a-token"), target_id)
    answers.update(role_requests(APIClient(), target_id))
    for name, response in answers.items():
        assert response.status_code == 401, name
        assert response.json() == {"error": "unauthorized"}


# --- create ----------------------------------------------------------------------------


def test_an_operator_creates_a_target_recorded_with_the_api_client_as_actor():
    client, http = operator(name="ops-bot")
    served, _ = api_client_make(name="shop-ci")

    response = target_create(http, clients=["shop-ci"])

    assert response.status_code == 201, response.content
    body = response.json()
    target = DeployTarget.objects.get(name="shop-prod")
    assert response["Location"] == f"/api/ops/deploy-targets/{target.pk}/"
    assert target.secret == RECEIVER_SECRET
    assert target.url == URL  # the query is kept for the calls
    assert list(target.clients.all()) == [served]
    assert body["url"] == SHOWN_URL
    assert body["url_query"].startswith("sha256:")
    assert body["has_secret"] is True
    assert body["secret_fingerprint"] == secret_fingerprint(RECEIVER_SECRET)
    assert "secret" not in body
    assert body["clients"] == ["shop-ci"]
    assert (body["priority"], body["max_in_flight"], body["applies_to"]) == (
        10,
        3,
        "deployments",
    )
    assert body["breaker"] == {
        "state": BreakerState.CLOSED,
        "failures": 0,
        "failed_at": None,
        "changed_at": None,
        "probe_job_id": None,
    }
    assert_no_secret(response)

    action = target_actions().get()
    assert action.action == OperatorAction.Action.CREATE_DEPLOY_TARGET
    assert action.actor_name == "api:ops-bot"
    assert action.actor is None
    assert action.details["target_id"] == target.pk
    assert action.details["after"]["clients"] == [{"id": served.pk, "name": "shop-ci"}]
    assert RECEIVER_SECRET not in json.dumps(action.details)

    # The key's record keeps neither the secret nor the URL's query.
    record = IdempotencyRecord.objects.get(client=client)
    kept = json.dumps(record.fingerprint_fields) + bytes(record.response_body).decode()
    assert RECEIVER_SECRET not in kept
    assert "jenkins-token" not in kept
    assert record.fingerprint_fields["secret"] == secret_fingerprint(RECEIVER_SECRET)


def test_a_new_target_takes_the_models_defaults_for_what_it_leaves_out():
    _, http = operator()
    response = post(http, TARGETS, {"name": "sim", "executor": "simulated"}, key="k")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["repository_pattern"] == body["environment_pattern"] == "*"
    assert (body["applies_to"], body["priority"], body["is_enabled"]) == ("", 100, True)
    assert (body["url"], body["url_query"], body["has_secret"]) == ("", "", False)
    assert (body["secret_fingerprint"], body["max_in_flight"]) == ("", None)
    assert body["clients"] == []


def test_a_create_retried_with_its_key_is_replayed_byte_for_byte():
    _, http = operator()
    first = target_create(http)
    again = target_create(http)

    assert first.status_code == 201
    assert again.status_code == 200
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert again["Location"] == first["Location"]
    assert "Idempotent-Replayed" not in first
    assert DeployTarget.objects.count() == 1
    assert target_actions().count() == 1


def test_a_create_key_reused_for_another_body_is_409_naming_the_fields():
    _, http = operator()
    target_create(http)
    response = target_create(http, priority=20, secret=OTHER_SECRET)

    assert response.status_code == 409
    assert response.json() == {
        "error": "idempotency_key_reused",
        "differing_fields": ["priority", "secret"],
    }
    assert DeployTarget.objects.count() == 1
    assert target_actions().count() == 1


def test_a_create_naming_an_unknown_client_is_422_and_records_nothing():
    _, http = operator()
    api_client_make(name="known")
    response = target_create(http, clients=["known", "ghost", "phantom"])

    assert response.status_code == 422
    assert response.json() == {
        "error": "invalid_payload",
        "details": {
            "clients": [
                "No API client named 'ghost'.",
                "No API client named 'phantom'.",
            ]
        },
    }
    assert not DeployTarget.objects.exists()
    assert not target_actions().exists()
    assert not IdempotencyRecord.objects.exists()


def test_a_name_another_target_has_is_422_not_a_server_error():
    _, http = operator()
    target_create(http)
    response = target_create(http, key="create-2")
    assert response.status_code == 422
    assert response.json()["details"] == {
        "name": ["A deploy target with this name already exists."]
    }
    assert DeployTarget.objects.count() == 1
    assert IdempotencyRecord.objects.count() == 1


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"name": 5}, "name"),
        ({"name": "not a slug"}, "name"),
        ({"name": None}, "name"),
        ({"priority": "5"}, "priority"),
        ({"priority": 5.5}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": -1}, "priority"),
        ({"priority": 40000}, "priority"),
        ({"is_enabled": "yes"}, "is_enabled"),
        ({"is_enabled": 1}, "is_enabled"),
        ({"max_in_flight": -1}, "max_in_flight"),
        ({"max_in_flight": 2**40}, "max_in_flight"),
        ({"max_in_flight": "3"}, "max_in_flight"),
        ({"clients": "shop-ci"}, "clients"),
        ({"clients": [7]}, "clients"),
        ({"executor": "teleport"}, "executor"),
        ({"applies_to": "everything"}, "applies_to"),
        ({"url": "https://user:password@ci.internal.example/hook"}, "url"),
        ({"url": "https://token@ci.internal.example/hook"}, "url"),
        ({"url": "ftp://ci.internal.example/hook"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": "https://ci.internal.example/" + "a" * 500}, "url"),
        ({"url": "https://ci.internal.example/\x00"}, "url"),
        ({"url": ""}, "url"),  # http needs a receiver (no DEPLOY_HTTP_URL in tests)
        ({"secret": "not-a-whsec"}, "secret"),
        ({"secret": RECEIVER_SECRET + "\r"}, "secret"),
        ({"secret": 12}, "secret"),
        ({"executor": "simulated"}, "url"),  # calls nothing: no URL or secret
        ({"executor": "github", "applies_to": "builds"}, "applies_to"),
        ({"repository_pattern": " "}, "repository_pattern"),
        ({"repository_pattern": "a" * 201}, "repository_pattern"),
        ({"reason": ["why"]}, "reason"),
    ],
)
def test_bad_input_is_422_naming_the_field_and_records_nothing(
    overrides, field, settings
):
    settings.DEPLOY_HTTP_URL = ""
    _, http = operator()
    response = target_create(http, **overrides)

    assert response.status_code == 422, response.content
    body = response.json()
    assert body["error"] == "invalid_payload"
    assert field in body["details"], body
    assert RECEIVER_SECRET not in response.content.decode()
    assert not DeployTarget.objects.exists()
    assert not target_actions().exists()
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.parametrize(
    "raw", [b"", b"[]", b"null", b'"text"', b"{", b"[" * 100_000 + b"]" * 100_000]
)
def test_a_body_that_is_not_a_json_object_is_400(raw):
    _, http = operator()
    response = http.post(
        TARGETS, data=raw, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k"
    )
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}


def test_a_create_without_a_key_is_400():
    _, http = operator()
    response = post(http, TARGETS, target_body(), key=None)
    assert response.status_code == 400
    assert response.json() == {"error": "idempotency_key_required"}
    assert not DeployTarget.objects.exists()


# --- list and read ---------------------------------------------------------------------


def test_the_list_is_a_cursor_page_newest_first_without_secrets():
    _, http = operator()
    for number in range(3):
        target_create(http, key=f"k{number}", name=f"target-{number}")

    page = role_http("auditor").get(TARGETS, {"page_size": 2})

    assert page.status_code == 200
    body = page.json()
    assert [target["name"] for target in body["results"]] == ["target-2", "target-1"]
    assert body["next"] and body["previous"] is None
    rest = role_http("auditor").get(body["next"]).json()
    assert [target["name"] for target in rest["results"]] == ["target-0"]
    assert_no_secret(page)


def test_a_target_is_read_with_its_breaker_read_only():
    _, http = operator()
    target_id = target_create(http).json()["id"]
    DeployTarget.objects.filter(pk=target_id).update(
        breaker_state=BreakerState.OPEN, breaker_failures=5
    )

    response = role_http("auditor").get(f"{TARGETS}{target_id}/")

    assert response.status_code == 200
    assert response.json()["breaker"]["state"] == "open"
    assert response.json()["breaker"]["failures"] == 5
    assert_no_secret(response)

    # A change names no breaker field: one sent is not a setting, and moves nothing.
    patch(http, target_id, {"priority": 11, "breaker": {"state": "closed"}})
    target = DeployTarget.objects.get(pk=target_id)
    assert (target.priority, target.breaker_state) == (11, BreakerState.OPEN)


@pytest.mark.parametrize("target_id", ["999999", str(2**63), str(10**30)])
def test_an_unknown_target_is_404(target_id):
    _, http = operator()
    for response in (
        http.get(f"{TARGETS}{target_id}/"),
        patch(http, int(target_id), {"priority": 1}),
        disable(http, int(target_id)),
    ):
        assert response.status_code == 404
        assert response.json() == {"error": "not_found"}
    assert not IdempotencyRecord.objects.exists()
    assert not target_actions().exists()


# --- change (PATCH) --------------------------------------------------------------------


def test_a_change_sets_what_it_names_and_keeps_the_rest(monkeypatch):
    _, http = operator(name="ops-bot")
    created = target_create(http).json()
    saved: list[bool] = []
    real_save = target_apis.deploy_target_save

    def spy(**arguments):
        changed = real_save(**arguments)
        saved.append(changed)
        return changed

    monkeypatch.setattr(target_apis, "deploy_target_save", spy)
    change = {"environment_pattern": "production", "priority": 5, "reason": "move"}

    first = patch(http, created["id"], change)

    assert first.status_code == 200, first.content
    body = first.json()
    assert (body["environment_pattern"], body["priority"]) == ("production", 5)
    target = DeployTarget.objects.get(pk=created["id"])
    assert target.secret == RECEIVER_SECRET  # kept: none was sent
    assert target.url == URL  # kept, its query with it
    assert body["secret_fingerprint"] == created["secret_fingerprint"]
    action = target_actions().latest("pk")
    assert action.action == OperatorAction.Action.CHANGE_DEPLOY_TARGET
    assert (action.actor_name, action.reason) == ("api:ops-bot", "move")
    assert action.details["before"]["priority"] == 10
    assert action.details["after"]["priority"] == 5
    assert_no_secret(first)

    # The same PATCH again changes nothing and records nothing.
    again = patch(http, created["id"], change)
    assert again.status_code == 200
    assert saved == [True, False]
    assert again.json() == body
    assert target_actions().count() == 2  # the create and one change
    assert not IdempotencyRecord.objects.exclude(operation_type__startswith="ops.")


def test_a_change_of_secret_url_and_clients():
    _, http = operator()
    created = target_create(http).json()
    served, _ = api_client_make(name="served")

    # The URL as answered keeps the stored query (as the admin's form does).
    patch(http, created["id"], {"url": SHOWN_URL})
    assert DeployTarget.objects.get(pk=created["id"]).url == URL

    response = patch(
        http, created["id"], {"secret": OTHER_SECRET, "clients": ["served"]}
    )
    assert response.status_code == 200, response.content
    target = DeployTarget.objects.get(pk=created["id"])
    assert target.secret == OTHER_SECRET
    assert list(target.clients.all()) == [served]
    assert response.json()["secret_fingerprint"] == secret_fingerprint(OTHER_SECRET)
    assert_no_secret(response)

    response = patch(http, created["id"], {"url_query_clear": True, "clients": []})
    target = DeployTarget.objects.get(pk=created["id"])
    assert (target.url, response.json()["url_query"]) == (SHOWN_URL, "")
    assert list(target.clients.all()) == []

    # Another address never keeps the old query.
    patch(http, created["id"], {"url": "https://other.internal.example/hook"})
    target = DeployTarget.objects.get(pk=created["id"])
    assert target.url == "https://other.internal.example/hook"


@pytest.mark.parametrize(
    "change",
    [
        {"priority": "5"},
        {"url": "https://user:pw@ci.internal.example/hook"},
        {"clients": ["ghost"]},
        {"secret": "not-a-whsec"},
        {"executor": "simulated"},  # keeps its URL and secret: refused
        {"is_enabled": None},
        {"url_query_clear": "yes"},
    ],
)
def test_a_bad_change_is_422_and_changes_nothing(change):
    _, http = operator()
    created = target_create(http).json()
    response = patch(http, created["id"], change)

    assert response.status_code == 422, response.content
    assert response.json()["error"] == "invalid_payload"
    assert http.get(f"{TARGETS}{created['id']}/").json() == created
    assert target_actions().count() == 1


def test_a_change_to_another_targets_name_is_422():
    _, http = operator()
    target_create(http, key="a", name="first")
    second = target_create(http, key="b", name="second").json()
    response = patch(http, second["id"], {"name": "first"})
    assert response.status_code == 422
    assert "name" in response.json()["details"]
    assert DeployTarget.objects.get(pk=second["id"]).name == "second"


@pytest.mark.parametrize("raw", [b"", b"[1]", b"{"])
def test_a_change_whose_body_is_not_a_json_object_is_400(raw):
    _, http = operator()
    created = target_create(http).json()
    response = http.patch(
        f"{TARGETS}{created['id']}/", data=raw, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}


# --- disable ---------------------------------------------------------------------------


def test_an_operator_disables_a_target_once_whatever_the_retries():
    _, http = operator(name="ops-bot")
    created = target_create(http).json()

    first = disable(http, created["id"], reason="receiver down")
    again = disable(http, created["id"], reason="receiver down")

    assert first.status_code == 200, first.content
    assert first.json()["is_enabled"] is False
    assert not DeployTarget.objects.get(pk=created["id"]).is_enabled
    assert (again.status_code, again.content) == (200, first.content)
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert_no_secret(first)
    changes = target_actions().filter(action=OperatorAction.Action.CHANGE_DEPLOY_TARGET)
    assert changes.count() == 1
    action = changes.get()
    assert (action.actor_name, action.reason) == ("api:ops-bot", "receiver down")
    assert action.details["before"]["is_enabled"] is True
    assert action.details["after"]["is_enabled"] is False


def test_a_disable_key_reused_for_another_reason_or_target_is_409():
    _, http = operator()
    first = target_create(http, key="a", name="first").json()
    second = target_create(http, key="b", name="second").json()
    disable(http, first["id"], reason="one")

    other_reason = disable(http, first["id"], reason="two")
    other_target = disable(http, second["id"], reason="one")

    assert other_reason.status_code == 409
    assert other_reason.json()["differing_fields"] == ["reason"]
    assert other_target.status_code == 409
    assert other_target.json()["differing_fields"] == ["target_id"]
    assert DeployTarget.objects.get(pk=second["id"]).is_enabled


def test_disabling_a_disabled_target_records_nothing_more():
    _, http = operator()
    created = target_create(http).json()
    disable(http, created["id"], key="one")
    response = disable(http, created["id"], key="two")
    assert response.status_code == 200
    assert response.json()["is_enabled"] is False
    assert target_actions().count() == 2  # the create, one disable


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": 5}, {"why": "x"}])
def test_a_disable_without_a_reason_is_422(body):
    _, http = operator()
    created = target_create(http).json()
    response = post(http, f"{TARGETS}{created['id']}/disable/", body, key="d")
    assert response.status_code == 422
    assert "reason" in response.json()["details"]
    assert DeployTarget.objects.get(pk=created["id"]).is_enabled
