import logging

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, DataError, InterfaceError, OperationalError
from django.http import JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler

from .errors import (
    InvalidJson,
    InvalidPayload,
    PayloadTooLarge,
    ServiceError,
    TemporarilyUnavailable,
)

logger = logging.getLogger(__name__)


def error_json_response(error: ServiceError) -> JsonResponse:
    """The one mapping from a service error to an HTTP response, for plain Django views."""
    response = JsonResponse(error.body(), status=error.status_code)
    if isinstance(error, TemporarilyUnavailable):
        response["Retry-After"] = str(error.retry_after_seconds)
    return response


def api_exception_handler(exc, context):
    """DRF's handler, with the error bodies of docs/http-api.md: ``{"error": <code>, ...}``."""
    if isinstance(exc, ServiceError):
        response = Response(exc.body(), status=exc.status_code)
        if isinstance(exc, TemporarilyUnavailable):
            response["Retry-After"] = str(exc.retry_after_seconds)
        return response
    if isinstance(exc, (OperationalError, InterfaceError)):
        logger.warning("api.database_unavailable", extra={"error": str(exc)})
        return api_exception_handler(TemporarilyUnavailable(), context)
    if isinstance(exc, DataError):
        # A value the database cannot store or compare (a NUL byte, an out-of-range number):
        # the input's fault, which validation should have caught before.
        logger.warning("api.data_error", extra={"error": str(exc)})
        exc = InvalidPayload()
        return Response(exc.body(), status=exc.status_code)
    if isinstance(exc, DatabaseError):
        logger.exception("api.database_error")
        return api_exception_handler(TemporarilyUnavailable(), context)
    if isinstance(exc, RequestDataTooBig):
        # A body over DATA_UPLOAD_MAX_MEMORY_SIZE: Django's own answer would be an HTML 400.
        exc = PayloadTooLarge()
        return Response(exc.body(), status=exc.status_code)
    if isinstance(exc, drf_exceptions.ParseError):
        exc = InvalidJson()
        return Response(exc.body(), status=exc.status_code)

    handled: Response | None = exception_handler(exc, context)
    if handled is None:
        return None
    response = handled
    if isinstance(
        exc, (drf_exceptions.NotAuthenticated, drf_exceptions.AuthenticationFailed)
    ):
        response.data = {"error": "unauthorized"}
    elif isinstance(exc, drf_exceptions.ValidationError):
        response.status_code = 422
        response.data = {"error": "invalid_payload", "details": exc.detail}
    elif isinstance(exc, drf_exceptions.NotFound):
        response.data = {"error": "not_found"}
    elif isinstance(exc, drf_exceptions.MethodNotAllowed):
        response.data = {"error": "method_not_allowed"}
    elif isinstance(exc, drf_exceptions.UnsupportedMediaType):
        response.status_code = 400
        response.data = {"error": "invalid_json"}
    elif isinstance(exc, drf_exceptions.PermissionDenied):
        response.data = {"error": "forbidden"}
    elif isinstance(exc, drf_exceptions.Throttled):
        response.data = {"error": "throttled"}
    return response
