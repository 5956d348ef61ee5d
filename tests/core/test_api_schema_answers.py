"""``/api/schema/`` documents every answer of every endpoint (docs/http-api.md), with its body
and its headers: a client generated from it knows every status it can meet
(tests/test_api_generated_client.py drives one)."""

import json

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_the_schema_documents_every_answer_with_its_body_and_headers():
    """Every status each operation can answer (docs/http-api.md) is in the schema, with a
    JSON body schema, and the headers the answers carry."""
    schema = APIClient().get("/api/schema/?format=json").json()
    paths = schema["paths"]
    expected = {
        ("post", "/api/deployments/"): {200, 202, 400, 401, 409, 413, 422, 503},
        ("post", "/api/builds/"): {200, 202, 400, 401, 409, 413, 422, 503},
        ("post", "/api/status-sync/"): {200, 201, 400, 401, 404, 409, 413, 422, 503},
        ("get", "/api/deployments/"): {200, 401, 404, 503},
        ("get", "/api/builds/"): {200, 401, 404, 503},
        ("get", "/api/deployments/{deployment_id}/"): {200, 401, 404, 503},
        ("get", "/api/builds/{build_id}/"): {200, 401, 404, 503},
        ("get", "/api/idempotency-keys/{operation_type}/{key}/"): {200, 401, 404, 503},
        ("get", "/api/research/documents/"): {200, 401, 404, 422, 503},
        ("get", "/api/research/documents/{entity_id}/"): {200, 401, 404, 503},
        ("get", "/api/research/documents/{entity_id}/revisions/"): {
            200,
            401,
            404,
            503,
        },
        ("get", "/api/webhooks/{slug}/events/{event_id}/"): {200, 401, 404, 503},
        ("get", "/api/whoami/"): {200, 401, 503},
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
