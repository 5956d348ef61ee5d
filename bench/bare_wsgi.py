"""The bare floor's WSGI application: the project's settings and database connection, but
no middleware at all and a URL configuration of its own (``bench.bare_urls``), so that what
a request costs here is gunicorn, Django's handler, one view and its one statement: a raw
insert as a user would write it in a plain Django view (docs/benchmarks.md, "How to read
it"). Served like ``config.wsgi``, by the same gunicorn settings:

    gunicorn bench.bare_wsgi --workers 2

Only with ``BENCH_ENDPOINTS`` on (``config.settings.bench``); anything else refuses to
start."""

import os

import django
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.base import BaseHandler
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.bench")
os.environ.setdefault("APP_PROCESS", "web")

django.setup(set_prefix=False)

if not settings.BENCH_ENDPOINTS:
    raise ImproperlyConfigured(
        "bench.bare_wsgi serves benchmark floors: only with BENCH_ENDPOINTS on "
        "(config.settings.bench)."
    )

URLCONF = "bench.bare_urls"


class BareHandler(WSGIHandler):
    """Django's WSGI handler with an empty middleware chain and the floor's URLs."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = convert_exception_to_response(self._get_response)

    def get_response(self, request):
        request.urlconf = URLCONF
        return BaseHandler.get_response(self, request)


application = BareHandler()
