"""``/api/schema/`` documents every answer of every endpoint (docs/http-api.md), with its body
and its headers: a client generated from it knows every status it can meet
(tests/test_api_generated_client.py drives one). And it states the rules the service
enforces on what it is sent, so that a generated client and a fuzzer see them
(tests/test_api_schema_fuzz.py holds the service to them)."""

import json
import re

import pytest
from rest_framework.test import APIClient

from deployments.naming import repository_is_valid
from idempotency.keys import idempotency_key_is_well_formed

pytestmark = pytest.mark.django_db


def test_the_schema_documents_every_answer_with_its_body_and_headers():
    """Every status each operation can answer (docs/http-api.md) is in the schema, with a
    JSON body schema, and the headers the answers carry."""
    schema = APIClient().get("/api/schema/?format=json").json()
    paths = schema["paths"]
    expected = {
        ("post", "/api/deployments/"): {200, 202, 400, 401, 403, 409, 413, 422, 503},
        ("post", "/api/builds/"): {200, 202, 400, 401, 403, 409, 413, 422, 503},
        ("post", "/api/status-sync/"): {
            200,
            201,
            400,
            401,
            403,
            404,
            409,
            413,
            422,
            503,
        },
        ("get", "/api/deployments/"): {200, 401, 403, 404, 422, 503},
        ("get", "/api/builds/"): {200, 401, 403, 404, 422, 503},
        ("get", "/api/deployments/{deployment_id}/"): {200, 401, 403, 404, 503},
        ("get", "/api/builds/{build_id}/"): {200, 401, 403, 404, 503},
        ("get", "/api/idempotency-keys/{operation_type}/{key}/"): {
            200,
            401,
            403,
            404,
            503,
        },
        ("get", "/api/research/documents/"): {200, 401, 403, 404, 422, 503},
        ("get", "/api/research/documents/{entity_id}/"): {200, 401, 403, 404, 503},
        ("get", "/api/research/documents/{entity_id}/revisions/"): {
            200,
            401,
            403,
            404,
            422,
            503,
        },
        ("get", "/api/webhooks/{slug}/events/{event_id}/"): {200, 401, 403, 404, 503},
        ("get", "/api/whoami/"): {200, 401, 403, 503},
    }
    for (method, path), statuses in expected.items():
        responses = paths[path][method]["responses"]
        assert {int(code) for code in responses} == statuses, (method, path)
        for code, response in responses.items():
            content = response.get("content", {})
            assert "application/json" in content, (method, path, code)
            assert content["application/json"].get("schema"), (method, path, code)
            if code == "503":
                assert "Retry-After" in response.get("headers", {}), (method, path)
            if code == "401":
                assert "WWW-Authenticate" in response.get("headers", {}), (method, path)

    for path in ("/api/deployments/", "/api/builds/"):
        responses = paths[path]["post"]["responses"]
        assert set(responses["202"]["headers"]) == {"Location"}
        assert set(responses["200"]["headers"]) == {"Location", "Idempotent-Replayed"}
        assert responses["200"]["content"] == responses["202"]["content"]
    sync = paths["/api/status-sync/"]["post"]["responses"]
    assert set(sync["200"]["headers"]) == {"Idempotent-Replayed"}
    assert sync["200"]["content"] == sync["201"]["content"]
    reused = json.dumps(paths["/api/deployments/"]["post"]["responses"]["409"])
    assert "IdempotencyKeyReused" in reused
    # Every action of the operator API: its key's refusals, its roles, and a replay's header
    # on its success (not required: the first answer has the same status and not the header).
    actions = [
        (path, operation)
        for path, operations in paths.items()
        if path.startswith("/api/ops/")
        for method, operation in operations.items()
        if method == "post"
    ]
    assert len(actions) >= 10
    for path, operation in actions:
        responses = operation["responses"]
        assert {"400", "401", "403", "409", "422", "503"} <= set(responses), path
        success = [code for code in responses if code.startswith("2")]
        assert success, path
        headers = {
            name: header
            for code in success
            for name, header in responses[code].get("headers", {}).items()
        }
        assert "Idempotent-Replayed" in headers, path
        parameters = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
        assert "Idempotency-Key" in parameters, path


def schema() -> dict:
    return APIClient().get("/api/schema/?format=json").json()


def python_pattern(pattern: str) -> re.Pattern[str]:
    """A schema pattern (ECMA-262) as Python reads it: ``$`` at the very end only."""
    assert pattern.startswith("^") and pattern.endswith("$"), pattern
    return re.compile(pattern[:-1] + r"\Z")


def ref(document: dict, value: dict) -> dict:
    return document["components"]["schemas"][value["$ref"].rsplit("/", 1)[1]]


KEYS = ["k", "deploy-42", "a b", "~" * 255, "x" * 256, "", " ", " a", "a ", "a\tb", "é"]
KEYS += ["a\x7f", "a\x00", "!" * 255]


def test_the_idempotency_key_header_states_its_rule():
    """1-255 printable ASCII characters, as a header carries them: HTTP drops the spaces
    at either end of a value, so the schema's rule is the server's on what arrives."""
    paths = schema()["paths"]
    for path in ("/api/deployments/", "/api/builds/", "/api/status-sync/"):
        [header] = [
            p
            for p in paths[path]["post"]["parameters"]
            if p["name"] == "Idempotency-Key"
        ]
        assert header["required"] is True
        rule = header["schema"]
        assert (rule["minLength"], rule["maxLength"]) == (1, 255)
        pattern = python_pattern(rule["pattern"])
        for key in KEYS:
            arrives = key.strip(" \t")
            accepted = key == arrives and idempotency_key_is_well_formed(key)
            assert bool(pattern.fullmatch(key)) is accepted, key


REPOSITORIES = ["acme/shop", "a/b", "acme/.github", "acme/...", "acme/..", "acme/."]
REPOSITORIES += [
    "../x",
    "./x",
    "a/b/c",
    "acme",
    "acme/sh op",
    "acme/\u212a",
    "a/" + "b" * 101,
]
REPOSITORIES += ["a" * 100 + "/" + "b" * 99, "acme/shop\n"]


def test_the_job_bodies_state_their_patterns():
    document = schema()
    components = document["components"]["schemas"]
    for name in ("DeploymentCreateInput", "BuildCreateInput"):
        members = components[name]["properties"]
        repository = members["repository"]
        pattern = python_pattern(repository["pattern"])
        for value in REPOSITORIES:
            fits = (
                bool(pattern.fullmatch(value)) and len(value) <= repository["maxLength"]
            )
            assert fits is repository_is_valid(value), value
        commit = python_pattern(members["commit_sha"]["pattern"])
        assert commit.fullmatch("ABC123def456") and commit.fullmatch("a" * 40)
        assert not commit.fullmatch("abc12") and not commit.fullmatch("a" * 41)
        assert not commit.fullmatch(" abc1234") and not commit.fullmatch("abc1234\n")
        for text in ("workflow", "triggered_by"):
            rule = members[text]
            assert rule["type"] == "string" and "oneOf" not in rule
            assert python_pattern(rule["pattern"]).fullmatch("")
            assert not python_pattern(rule["pattern"]).fullmatch("a\x00b")
    environment = components["DeploymentCreateInput"]["properties"]["environment"]
    assert python_pattern(environment["pattern"]).fullmatch("staging")
    assert not python_pattern(environment["pattern"]).fullmatch("staging\n")
    assert environment["minLength"] == 1


def test_status_sync_takes_exactly_one_of_the_ids():
    document = schema()
    body = document["paths"]["/api/status-sync/"]["post"]["requestBody"]
    assert body["required"] is True
    one_of = ref(document, body["content"]["application/json"]["schema"])["oneOf"]
    forms = [ref(document, form) for form in one_of]
    ids = [{"deployment_id", "build_id"} & set(form["required"]) for form in forms]
    assert sorted(map(sorted, ids)) == [["build_id"], ["deployment_id"]]
    for form in forms:
        assert {"status", "reported_at"} <= set(form["required"])
        assert form["properties"]["reported_at"]["format"] == "date-time"


def test_list_parameters_state_their_types():
    paths = schema()["paths"]
    documents = {
        p["name"]: p for p in paths["/api/research/documents/"]["get"]["parameters"]
    }
    assert documents["updated_since"]["schema"] == {
        "type": "string",
        "format": "date-time",
    }
    assert documents["is_deleted"]["schema"] == {"type": "boolean"}
    for path in ("/api/deployments/", "/api/builds/", "/api/research/documents/"):
        [page_size] = [
            p for p in paths[path]["get"]["parameters"] if p["name"] == "page_size"
        ]
        assert page_size["schema"] == {"type": "integer", "minimum": 1}
        assert "422" in paths[path]["get"]["responses"]


def test_the_webhook_endpoint_states_its_envelope():
    document = schema()
    operation = document["paths"]["/webhooks/{slug}/"]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    [envelope] = body["allOf"]
    research = ref(document, envelope)
    assert set(research["required"]) == {
        "event_id",
        "event_type",
        "occurred_at",
        "entity",
    }
    assert research["properties"]["event_id"]["maxLength"] == 128
    assert research["properties"]["occurred_at"]["format"] == "date-time"
    assert research["properties"]["entity"]["required"] == ["entity_id", "entity_type"]
    assert "github" in body["description"]
    headers = {p["name"] for p in operation["parameters"] if p["in"] == "header"}
    assert {"X-Webhook-Id", "X-Webhook-Signature", "X-Hub-Signature-256"} <= headers


def test_the_answers_link_to_what_follows():
    """OpenAPI links: create, then read, report a status, look the key up."""
    paths = schema()["paths"]
    for status in ("202", "200"):
        links = paths["/api/deployments/"]["post"]["responses"][status]["links"]
        assert links["GetDeployment"] == {
            "operationId": "deployments_retrieve",
            "parameters": {"deployment_id": "$response.body#/deployment_id"},
            "description": "The deployment, as it stands now.",
        }
        assert links["ReportDeploymentStatus"]["operationId"] == "status_sync_create"
        assert links["ReportDeploymentStatus"]["requestBody"] == {
            "deployment_id": "$response.body#/deployment_id"
        }
        assert links["LookUpKey"]["parameters"] == {
            "operation_type": "deployment.create",
            "key": "$request.header.Idempotency-Key",
        }
    read = paths["/api/deployments/{deployment_id}/"]["get"]["responses"]["200"]
    assert (
        read["links"]["ReportDeploymentStatus"]["operationId"] == "status_sync_create"
    )
    built = paths["/api/builds/"]["post"]["responses"]["202"]["links"]
    assert built["GetBuild"]["operationId"] == "builds_retrieve"
    received = paths["/webhooks/{slug}/"]["post"]["responses"]["202"]["links"]
    assert received["GetEventStatus"]["parameters"] == {
        "slug": "$request.path.slug",
        "event_id": "$response.body#/event_id",
    }


def test_the_description_says_what_every_path_answers():
    description = schema()["info"]["description"]
    for words in ("405", "Allow", "OPTIONS", "HEAD", "414", "uri_too_long"):
        assert words in description
