import logging

from celery import current_app
from django.db import connection
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe
from django.views.defaults import page_not_found

from .relay.state import relay_state

logger = logging.getLogger(__name__)


def public_get(view):
    """A public GET endpoint (docs/http-api.md, "Health and metrics"): HEAD is answered as GET
    (the server sends no body), any other method 405 with ``Allow: GET, HEAD`` and no body.
    Exempt from CSRF, which has nothing to protect here (no session, nothing changes): its
    403 page answered every POST, PUT, PATCH and DELETE before the method was looked at."""
    return csrf_exempt(require_safe(view))


@public_get
def healthz(request):
    """The process is alive and answers; nothing else is checked."""
    return JsonResponse({"status": "ok"})


def _database_ready() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any failure means "not ready", never a 500
        logger.warning("readyz.database_unreachable", extra={"error": str(exc)})
        return False
    return True


def _broker_ready() -> bool:
    try:
        with current_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:
        logger.warning("readyz.broker_unreachable", extra={"error": str(exc)})
        return False
    return True


@public_get
def readyz(request):
    """Database and broker reachable: 200; otherwise 503 naming what is down. The body also
    says whether the outbox relays keep up (``relay``): that is the workers' business, not
    this process's readiness, so it never makes the answer a 503."""
    checks = {"database": _database_ready(), "broker": _broker_ready()}
    ready = all(checks.values())
    body = {"status": "ok" if ready else "unavailable", "checks": checks}
    if checks["database"]:
        try:
            body["relay"] = relay_state()
        except Exception as exc:  # never a 500 from a health probe
            logger.warning("readyz.relay_unreadable", extra={"error": str(exc)})
    return JsonResponse(body, status=200 if ready else 503)


@public_get
def metrics(request):
    """Prometheus text format, aggregated over every process of this machine's deployment."""
    from .metrics import metrics_exposition

    body, content_type = metrics_exposition()
    return HttpResponse(body, content_type=content_type)


def not_found(request, exception):
    """404 anywhere under ``/api/`` (and ``/webhooks/``) answers the JSON error body every
    API error has; the admin and other pages keep Django's page."""
    if request.path.startswith(("/api/", "/webhooks/")):
        return JsonResponse({"error": "not_found"}, status=404)
    return page_not_found(request, exception)
