"""The OpenAPI links of the job operations (docs/http-api.md, "API schema"): what a client (or
a fuzzer's stateful phase) can do next with the job an answer names, read it, report its
status, look its key up, as OpenAPI states it: ``links`` on the answer, each an operation and
the values it takes from the request or the answer."""

from __future__ import annotations

from typing import Any

from .services.jobs import OPERATION_TYPES

# The answer that names a new (or replayed) job, per operation, and what its id is called.
_JOB_ANSWERS = {
    ("/api/deployments/", "post"): ("deployment", ("202", "200")),
    ("/api/builds/", "post"): ("build", ("202", "200")),
    ("/api/deployments/{deployment_id}/", "get"): ("deployment", ("200",)),
    ("/api/builds/{build_id}/", "get"): ("build", ("200",)),
}


def _job_links(kind: str, *, created: bool) -> dict[str, Any]:
    plural = f"{kind}s"
    job_id = f"$response.body#/{kind}_id"
    links: dict[str, Any] = {
        f"Get{kind.title()}": {
            "operationId": f"{plural}_retrieve",
            "parameters": {f"{kind}_id": job_id},
            "description": f"The {kind}, as it stands now.",
        },
        f"Report{kind.title()}Status": {
            "operationId": "status_sync_create",
            "requestBody": {f"{kind}_id": job_id},
            "description": f"Report a status of the {kind} (its id in the body).",
        },
    }
    if created:
        key = "$request.header.Idempotency-Key"
        links["LookUpKey"] = {
            "operationId": "idempotency_keys_retrieve",
            "parameters": {
                "operation_type": OPERATION_TYPES[kind],
                "key": key,
            },
            "description": "What became of the request's Idempotency-Key.",
        }
        links[f"List{kind.title()}sByKey"] = {
            "operationId": f"{plural}_list",
            "parameters": {"idempotency_key": key},
            "description": f"The {kind} made with the request's key, as a list.",
        }
    return links


def job_links_postprocess(result, generator, request, public):
    """A drf-spectacular post-processing hook: the links of the job operations' answers."""
    paths = result.get("paths", {})
    for (path, method), (kind, statuses) in _JOB_ANSWERS.items():
        operation = paths.get(path, {}).get(method)
        if operation is None:
            continue
        for status in statuses:
            response = operation["responses"].get(status)
            if response is not None:
                response["links"] = _job_links(kind, created=method == "post")
    return result
