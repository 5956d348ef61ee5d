"""What every operator API endpoint shares (docs/http-api.md, "Operator API"): its roles
(operators change, operators and auditors read), and, for a POST, the Idempotency-Key
contract of the trigger API, scoped per API client and operation, with the path's ids in
the fingerprint (the same key for another job or source is a reused key)."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers
from rest_framework.views import APIView

from core.actors import Actor
from core.errors import NotFound
from core.permissions import OPERATORS, OPS_READERS
from core.schema import ERROR_REF
from idempotency.apis import IDEMPOTENCY_KEY_HEADER, IdempotentPostMixin
from idempotency.schema import IdempotencyKeyReusedSerializer

# A primary key PostgreSQL's bigint holds; a larger id in a path names nothing.
ID_MAX = 2**63 - 1

FORBIDDEN = OpenApiResponse(
    response=ERROR_REF,
    description="`forbidden`: the API client's role may not do this (reads: operator "
    "or auditor; changes: operator).",
)


def id_checked(value: int) -> int:
    """An id from a path, or ``NotFound`` for one no row can have."""
    if not 0 < value <= ID_MAX:
        raise NotFound()
    return value


def ops_action_schema(
    *,
    request: type[serializers.Serializer] | serializers.Serializer,
    output: Any,
    not_found: str = "",
    conflicts: str = "",
    first: int = 200,
    more: dict | None = None,
) -> dict:
    """The ``extend_schema`` arguments of an operator action under the Idempotency-Key
    contract whose first answer is ``first`` (200: the same status as its replay, which
    alone carries ``Idempotent-Replayed``). ``conflicts`` names the action's own 409 codes
    besides a reused key's (answered with the ``Error`` shape, of which the reused key's
    body is one); ``more``, other answers."""
    responses: dict[int, Any] = {
        first: OpenApiResponse(
            response=output,
            description="The action's answer; a retry with the same key and body "
            "within the key's TTL gets the first answer byte for byte (status 200), with "
            "`Idempotent-Replayed: true`, and nothing is done again.",
        ),
        403: FORBIDDEN,
        409: OpenApiResponse(
            response=ERROR_REF if conflicts else IdempotencyKeyReusedSerializer,
            description=(f"{conflicts}, or " if conflicts else "")
            + "`idempotency_key_reused`: the key was first used for another action "
            "(`differing_fields` names how it differs).",
        ),
    }
    if first != 200:
        responses[200] = OpenApiResponse(
            response=output, description="A replay of the key's first answer."
        )
    if not_found:
        responses[404] = OpenApiResponse(response=ERROR_REF, description=not_found)
    responses.update(more or {})
    return {
        "request": request,
        "responses": responses,
        "parameters": [
            IDEMPOTENCY_KEY_HEADER,
            OpenApiParameter(
                "Idempotent-Replayed",
                str,
                OpenApiParameter.HEADER,
                required=False,
                enum=["true"],
                response=[200],
                description="Present on a replay of the key's first answer.",
            ),
        ],
    }


class OpsReadApi(APIView):
    """A read of the operator API: operators and auditors."""

    read_roles = OPS_READERS


class OpsActionApi(IdempotentPostMixin, APIView):
    """A POST of the operator API under the Idempotency-Key contract: the view names its
    ``operation_type``, its ``input_serializer_class`` and ``perform``; the fingerprint is
    the whole validated body and the path's ids (``path_fields``). ``perform`` runs in the
    transaction that records the key, and records the operator action with the API client
    as actor (``actor``)."""

    read_roles = OPS_READERS
    write_roles = OPERATORS
    # The URL's parts that name what the action is on (a job's id, a source's slug).
    path_fields: tuple[str, ...] = ()

    def fingerprint_values(self, data: dict) -> dict:
        values: dict[str, Any] = {
            name: self.kwargs.get(name) for name in self.path_fields
        }
        values.update(data)
        # As JSON reads it (an instant as RFC 3339 text): the fingerprint is of JSON.
        return json.loads(json.dumps(values, cls=DjangoJSONEncoder))

    @staticmethod
    def actor(client) -> Actor:
        return Actor.api_client(client)
