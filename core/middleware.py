"""Request bodies that nothing may read, refused before anything reads them (docs/security.md,
"Request bodies").

No view of the product takes uploads. A ``multipart/*`` body, parsed by Django, has its files
stored (in memory, then on disk past ``FILE_UPLOAD_MAX_MEMORY_SIZE``) before any view or check
runs: the CSRF check of a form reads the body to look for its token. So:

- any body declared larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is 413 ``payload_too_large``
  before it is read (Django's own limit leaves a multipart body's files out);
- a ``multipart/*`` body is refused with 415 ``unsupported_media_type``, except by the
  admin's own forms (``/admin/``, its login included: Django's admin posts a form with a file
  field multipart, and its test client every form) and by the API (``/api/``), whose parser
  refuses it without reading it, after authentication and the ``Idempotency-Key``, as 400
  ``invalid_json``;
- a multipart body that is parsed never stores a file (``core.uploads``).

Placed before the session, CSRF and authentication middleware. ``POST /webhooks/<slug>/`` has
left the stack before this: its view reads the raw bytes against ``WEBHOOK_MAX_BODY_BYTES``, in
its documented order of checks.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from .errors import PayloadTooLarge, UnsupportedMediaType
from .exceptions import error_json_response

API_PREFIX = "/api/"


class RequestBodyBoundMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.admin_prefix = reverse("admin:index")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refused = self.refusal(request)
        if refused is not None:
            return error_json_response(refused)
        return self.get_response(request)

    def refusal(
        self, request: HttpRequest
    ) -> UnsupportedMediaType | PayloadTooLarge | None:
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and declared > limit:
            return PayloadTooLarge()
        media_type = request.META.get("CONTENT_TYPE", "").partition(";")[0]
        if not media_type.strip().lower().startswith("multipart/"):
            return None
        if request.path_info.startswith((self.admin_prefix, API_PREFIX)):
            return None
        return UnsupportedMediaType()
