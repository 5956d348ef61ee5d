"""The verifiable log's public endpoints (docs/http-api.md, "Verifiable log"): no login, since a
checkpoint reveals a size and a hash, a proof only hashes. Thin: parse, call one selector,
answer."""

from __future__ import annotations

import base64
import re

from django.http import HttpResponse, JsonResponse

from core.errors import ServiceError
from core.exceptions import error_json_response
from core.views import public_get

from .checkpoints import checkpoint_latest_note, log_verifier_key
from .errors import InvalidParameter
from .log import log_consistency_proof, log_inclusion_proof

# A tree size fits in a bigint: 19 digits at most. No sign, no spaces, no leading zero.
_INTEGER = re.compile(r"0|[1-9][0-9]{0,18}")


def _integer(request, name: str) -> int:
    value = request.GET.get(name)
    if value is None:
        raise InvalidParameter(f"{name} is missing", extra={"parameter": name})
    if not _INTEGER.fullmatch(value):
        raise InvalidParameter(
            f"{name} is not a decimal integer", extra={"parameter": name}
        )
    return int(value)


def _text(body: str) -> HttpResponse:
    response = HttpResponse(body, content_type="text/plain; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    return response


def _hashes(hashes: list[bytes]) -> JsonResponse:
    return JsonResponse({"hashes": [base64.b64encode(h).decode() for h in hashes]})


@public_get
def checkpoint(request):
    """The latest signed checkpoint (the signed empty tree before the first)."""
    return _text(checkpoint_latest_note())


@public_get
def public_key(request):
    """The note verifier key that checks the checkpoints' signature."""
    return _text(log_verifier_key() + "\n")


@public_get
def inclusion_proof(request):
    try:
        index = _integer(request, "index")
        size = _integer(request, "size")
        return _hashes(log_inclusion_proof(index=index, size=size))
    except ServiceError as error:
        return error_json_response(error)


@public_get
def consistency_proof(request):
    try:
        size1 = _integer(request, "from")
        size2 = _integer(request, "to")
        return _hashes(log_consistency_proof(size1=size1, size2=size2))
    except ServiceError as error:
        return error_json_response(error)
