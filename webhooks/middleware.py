"""The webhook endpoint's own lane through the middleware (docs/bench-log/2026-12-01.md, "Where the
accepted request's time goes").

``POST /webhooks/<slug>/`` is served by a plain view that authenticates by signature and
answers JSON: sessions, CSRF, authentication, messages, static files and the admin's login
throttle have nothing to do for it, and together they cost a sizeable share of the request.
Placed after ``SecurityMiddleware`` (HTTPS redirect, HSTS, nosniff) and the correlation id's
middleware, this one calls the webhook view directly and sets the one header the rest would
have added (``X-Frame-Options``), after the one check of theirs that applies to it (the Host
header against ``ALLOWED_HOSTS``); every other request goes on through the whole stack."""

from __future__ import annotations

import functools

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, ResolverMatch, get_urlconf, resolve, reverse

from core.tracing import server_span, tracing_enabled

from .views import webhook_receive


@functools.lru_cache(maxsize=1024)
def _webhook_match(urlconf: str | None, path: str) -> ResolverMatch | None:
    """The endpoint's match for ``path``, or None: resolved once per path (and URL
    configuration) while it stays among the last 1,024 asked, instead of once per delivery
    (a tenth of the Python time a delivery took)."""
    del urlconf  # a key of the cache: resolve() reads the thread's own
    try:
        match = resolve(path)
    except Resolver404:
        return None
    return match if match.func is webhook_receive else None


class WebhookFastLaneMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        # "/webhooks/": where the URL configuration mounts the endpoint.
        self.prefix = reverse("webhooks:receive", args=["-"]).removesuffix("-/")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(self.prefix):
            match = _webhook_match(get_urlconf(), request.path_info)
            if match is not None:
                if tracing_enabled():
                    # Its own server span: the Django instrumentation's middleware comes
                    # after this one (core/tracing.py, ``server_span``).
                    with server_span(request, route=match.route) as span:
                        response = self._answer(request, match)
                        span.set_attribute(
                            "http.response.status_code", response.status_code
                        )
                    return response
                return self._answer(request, match)
        return self.get_response(request)

    @staticmethod
    def _answer(request: HttpRequest, match: ResolverMatch) -> HttpResponse:
        # What CommonMiddleware does first for every other request: a Host outside
        # ALLOWED_HOSTS raises DisallowedHost, which Django answers 400.
        request.get_host()
        response = webhook_receive(request, *match.args, **match.kwargs)
        response.setdefault("X-Frame-Options", settings.X_FRAME_OPTIONS)
        return response
