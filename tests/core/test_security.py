"""Claims of docs/security.md that no other test covers: which views opt out of CSRF, the
headers every answer carries, and the HTTPS settings that DJANGO_HTTPS turns on or off."""

import json

import pytest
from django.test import RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authentication import SessionAuthentication
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from tests.core.test_settings import PRODUCTION_ENV
from tests.processes import manage
from webhooks.views import webhook_receive


def _callbacks(resolver: URLResolver, prefix: str = ""):
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            yield from _callbacks(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.callback


def test_no_csrf_exempt_view_a_cookie_could_reach_acts_on_it():
    """DRF marks every API view csrf_exempt and enforces CSRF itself only for session
    authentication; the API authenticates with Bearer tokens alone, so no cookie reaches it.
    The plain views exempt are the webhook view (signatures, never cookies) and the public
    GET endpoints, which serve GET and HEAD and nothing else: a cross-site form that posts
    to them gets a 405, and nothing changes."""
    exempt_plain_views = []
    api_views = []
    for route, callback in _callbacks(get_resolver()):
        if not getattr(callback, "csrf_exempt", False):
            continue
        view_class = getattr(callback, "cls", None)
        if view_class is not None and issubclass(view_class, APIView):
            api_views.append((route, view_class))
        else:
            exempt_plain_views.append((route, callback))
    public = {
        "healthz",
        "readyz",
        "metrics",
        "audit/checkpoint",
        "audit/public-key",
        "audit/proof/inclusion",
        "audit/proof/consistency",
    }
    assert {route for route, _ in exempt_plain_views} == {
        "webhooks/<str:slug>/",
        *public,
    }
    for route, view in exempt_plain_views:
        if route in public:
            for method in ("POST", "PUT", "PATCH", "DELETE"):
                response = view(RequestFactory().generic(method, f"/{route}"))
                assert response.status_code == 405, (route, method)
        else:
            assert view is webhook_receive
    assert api_views  # the API is in the URLconf: the loop above has seen it
    assert SessionAuthentication not in api_settings.DEFAULT_AUTHENTICATION_CLASSES
    for route, view_class in api_views:
        assert not any(
            issubclass(auth, SessionAuthentication)
            for auth in view_class.authentication_classes
        ), route


@pytest.mark.django_db
def test_admin_forms_refuse_a_post_without_the_csrf_token():
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    response = strict.post("/admin/login/", {"username": "a", "password": "b"})
    assert response.status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/admin/login/", "/api/docs/", "/healthz"])
def test_answers_refuse_framing_and_content_sniffing(client, path):
    response = client.get(path)
    assert response.status_code == 200
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"


SETTINGS_DUMP = (
    "import json; from django.conf import settings as s; print(json.dumps({n: getattr(s, n)"
    " for n in ('SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', 'SECURE_HSTS_PRELOAD',"
    " 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SESSION_COOKIE_HTTPONLY',"
    " 'X_FRAME_OPTIONS', 'DEBUG', 'SECURE_REDIRECT_EXEMPT')}))"
)


def production_settings(**env: str) -> dict:
    result = manage("shell", "-c", SETTINGS_DUMP, env={**PRODUCTION_ENV, **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_production_turns_on_https_redirect_hsts_and_secure_cookies_by_default():
    values = production_settings()
    assert values["DEBUG"] is False
    assert values["SECURE_SSL_REDIRECT"] is True
    assert values["SECURE_HSTS_SECONDS"] == 31536000
    assert values["SECURE_HSTS_PRELOAD"] is True
    assert values["SESSION_COOKIE_SECURE"] is True
    assert values["CSRF_COOKIE_SECURE"] is True
    assert values["SESSION_COOKIE_HTTPONLY"] is True
    assert values["X_FRAME_OPTIONS"] == "DENY"
    # Probes of the load balancer and Prometheus may use plain HTTP inside the network.
    assert values["SECURE_REDIRECT_EXEMPT"] == [r"^healthz$", r"^readyz$", r"^metrics$"]


@pytest.mark.slow
def test_django_https_false_serves_plain_http_without_hsts_or_secure_cookies():
    values = production_settings(DJANGO_HTTPS="false")
    assert values["SECURE_SSL_REDIRECT"] is False
    assert values["SECURE_HSTS_SECONDS"] == 0
    assert values["SESSION_COOKIE_SECURE"] is False
    assert values["CSRF_COOKIE_SECURE"] is False
    assert values["X_FRAME_OPTIONS"] == "DENY"


@pytest.mark.django_db
def test_a_forged_x_forwarded_for_does_not_escape_the_login_throttle(client, settings):
    """The throttle keys on the peer address the server saw (REMOTE_ADDR), not on a header the
    client chooses: a new X-Forwarded-For on every attempt still ends in the lockout."""
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user(
        "operator", password="correct-horse-battery", is_staff=True
    )
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 3

    def login(password, n):
        return client.post(
            "/admin/login/?next=/admin/",
            {"username": "operator", "password": password},
            REMOTE_ADDR="203.0.113.9",
            HTTP_X_FORWARDED_FOR=f"198.51.100.{n}",
        )

    for n in range(3):
        login("wrong", n)
    response = login("correct-horse-battery", 99)
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_demo_setup_refuses_to_create_known_credentials_with_debug_off(settings):
    from django.contrib.auth import get_user_model
    from django.core.management import CommandError, call_command

    from core.models import ApiClient

    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG"):
        call_command("demo_setup")
    assert not get_user_model().objects.exists()
    assert not ApiClient.objects.exists()


@pytest.mark.django_db
def test_an_api_body_over_the_upload_limit_is_413_with_its_error_code(api, settings):
    from deployments.models import Deployment
    from idempotency.models import IdempotencyRecord

    body = json.dumps({"repository": "acme/app", "padding": "x" * 4096})
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    response = api.post(
        "/api/deployments/",
        data=body,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="too-large-1",
    )
    assert response.status_code == 413
    assert response.json() == {"error": "payload_too_large"}
    assert not Deployment.objects.exists()
    assert not IdempotencyRecord.objects.exists()


FORGED_PROTO = (
    "from django.test import Client; "
    "r = Client().get('/api/whoami/', HTTP_HOST='inbox.example.com', "
    "HTTP_X_FORWARDED_PROTO='https'); "
    "print(r.status_code, r.get('Location', ''), r.has_header('Strict-Transport-Security'))"
)


def production_answer(**env: str) -> list[str]:
    result = manage("shell", "-c", FORGED_PROTO, env={**PRODUCTION_ENV, **env})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1].split()


@pytest.mark.slow
def test_a_forged_x_forwarded_proto_is_not_trusted_by_default():
    """A client reaching the server directly cannot claim HTTPS with a header: plain HTTP is
    still redirected, and no HSTS is sent over it."""
    assert production_answer() == [
        "301",
        "https://inbox.example.com/api/whoami/",
        "False",
    ]


@pytest.mark.slow
def test_behind_a_proxy_the_operator_trusts_x_forwarded_proto():
    status, *_, hsts = production_answer(DJANGO_TRUST_X_FORWARDED_PROTO="true")
    assert (status, hsts) == ("401", "True")  # served as HTTPS: no redirect
