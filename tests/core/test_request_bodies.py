"""Bodies before authentication: no view of the product takes uploads. A body declared larger
than Django's own limit is refused before it is read (a 40 MiB multipart body to the admin's
login used to be stored on disk before the CSRF check refused it); a ``multipart/*`` body is
refused outside the admin's own forms, and parsing one never stores a file."""

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, RequestFactory
from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

from deployments.models import Deployment
from idempotency.models import IdempotencyRecord

pytestmark = pytest.mark.django_db

UPLOAD_BYTES = 40 * 1024 * 1024


def multipart_upload(size: int = UPLOAD_BYTES) -> bytes:
    upload = SimpleUploadedFile("big.bin", bytes(size))
    return encode_multipart(BOUNDARY, {"username": "admin", "file": upload})


@pytest.fixture
def spool(settings, tmp_path):
    """Where Django would store an uploaded file too large to keep in memory."""
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path)
    return tmp_path


def test_a_large_multipart_upload_to_the_admin_login_is_refused_before_it_is_read(
    spool,
):
    http = Client(enforce_csrf_checks=True)
    # With the CSRF cookie of the login page and no token: Django would look for the token
    # in the body, and parsing the body stores its file first.
    assert http.get("/admin/login/").status_code == 200
    response = http.generic(
        "POST", "/admin/login/", data=multipart_upload(), content_type=MULTIPART_CONTENT
    )
    assert response.status_code == 413
    assert response.json() == {"error": "payload_too_large"}
    assert list(spool.iterdir()) == []


def test_a_body_declared_over_the_limit_is_413_before_it_is_read(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    http = Client(enforce_csrf_checks=True)
    assert http.get("/admin/login/").status_code == 200
    response = http.post(
        "/admin/login/",
        data="username=" + "x" * 5000,
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 413
    assert response.json() == {"error": "payload_too_large"}


def test_parsing_a_multipart_body_never_stores_a_file(settings, spool):
    """Within the limit, and under /admin/, where a multipart body is parsed: its fields are
    read, its files skipped."""
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 1024  # a file above it would go to the spool
    upload = SimpleUploadedFile("small.bin", bytes(64 * 1024))
    request = RequestFactory().post(
        "/admin/login/", {"username": "admin", "file": upload}
    )
    assert request.POST["username"] == "admin"
    assert not request.FILES
    assert list(spool.iterdir()) == []


@pytest.mark.parametrize("path", ["/healthz", "/metrics", "/no-such-page/"])
def test_a_multipart_body_is_refused_outside_the_admin(path, spool):
    response = Client().generic(
        "POST", path, data=multipart_upload(1024), content_type=MULTIPART_CONTENT
    )
    assert response.status_code == 415
    assert response.json() == {"error": "unsupported_media_type"}


def test_a_multipart_body_to_the_api_is_its_documented_400(api, spool):
    """The API's parser refuses it, after the token and the key, without reading it."""
    response = api.generic(
        "POST",
        "/api/deployments/",
        data=multipart_upload(1024),
        content_type=MULTIPART_CONTENT,
        HTTP_IDEMPOTENCY_KEY="multipart-1",
    )
    assert response.status_code == 400
    assert response.json() == {"error": "invalid_json"}
    assert not Deployment.objects.exists()
    assert not IdempotencyRecord.objects.exists()
    anonymous = Client().generic(
        "POST",
        "/api/deployments/",
        data=multipart_upload(1024),
        content_type=MULTIPART_CONTENT,
    )
    assert anonymous.status_code == 401


def test_the_admin_forms_may_be_posted_multipart(admin_client):
    """As Django's admin posts a form with a file field, and its test client every form."""
    response = admin_client.post(
        "/admin/webhooks/webhooksource/", {"action": "", "index": "0"}
    )
    assert response.status_code in (200, 302)


def test_no_admin_form_takes_a_file():
    """What skipping every file rests on: an admin form with a file field fails here first."""
    user = get_user_model()(username="root", is_superuser=True, is_staff=True)
    request = RequestFactory().get("/admin/")
    request.user = user
    for model, model_admin in admin.site._registry.items():
        form = model_admin.get_form(request)
        assert not form().is_multipart(), model
        for inline in model_admin.get_inline_instances(request):
            assert not inline.get_formset(request).form().is_multipart(), model
