"""How every ``/api/`` view reads its body: a JSON object, or 400 ``invalid_json``
(docs/http-api.md, "Errors"; docs/security.md, "Request bodies")."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.request import Request

from .errors import InvalidJson


class JSONObjectParser(JSONParser):
    """DRF's strict JSON parser (no NaN or Infinity), where anything but a JSON object is a
    parse error: a body nested too deep for the decoder (``RecursionError``, which DRF's
    parser lets escape as a 500) and a top-level list, number, string or null alike."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deep") from None
        if not isinstance(data, dict):
            raise ParseError("JSON parse error - not an object")
        return data


def json_object_body(request: Request) -> dict:
    """The request's body as a JSON object. DRF hands an empty body to no parser and reads
    it as ``{}``; an empty body is not a JSON object either."""
    if request.stream is None:
        raise InvalidJson()
    return request.data
