"""A second factor for the admin (django-otp, TOTP devices), as ``ADMIN_TWO_FACTOR`` says:
``offered`` (staff who enrolled a device must use it), ``superusers`` (the production
default: superusers must have one too), ``staff`` (every staff user), ``off``
(docs/security.md, "Second factor")."""

import base64
import io
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice

pytestmark = pytest.mark.django_db

PASSWORD = "correct-horse-battery"


@pytest.fixture
def root():
    return get_user_model().objects.create_superuser("root", "r@example.com", PASSWORD)


@pytest.fixture
def operator():
    return get_user_model().objects.create_user(
        "operator", password=PASSWORD, is_staff=True
    )


def enrol(username: str) -> bytes:
    """``manage.py admin_2fa enrol USERNAME``; returns the secret of the URL it printed."""
    out = io.StringIO()
    call_command("admin_2fa", "enrol", username, stdout=out)
    url = out.getvalue().strip().splitlines()[-1]
    assert url.startswith("otpauth://totp/")
    secret = parse_qs(urlparse(url).query)["secret"][0]
    return base64.b32decode(secret + "=" * (-len(secret) % 8))


def token_of(key: bytes) -> str:
    return f"{totp(key):06d}"


def login(client, username, otp_token=""):
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": PASSWORD, "otp_token": otp_token},
    )


def logged_in(client) -> bool:
    return client.get("/admin/").status_code == 200


def test_offered_staff_without_a_device_log_in_with_their_password(
    client, settings, operator
):
    settings.ADMIN_TWO_FACTOR = "offered"
    assert login(client, "operator").status_code == 302
    assert logged_in(client)


def test_offered_staff_with_a_device_need_its_token(client, settings, operator):
    settings.ADMIN_TWO_FACTOR = "offered"
    key = enrol("operator")

    refused = login(client, "operator")
    assert refused.status_code == 200  # the form again, with its error
    assert not logged_in(client)
    wrong = login(
        client, "operator", "000000" if token_of(key) != "000000" else "111111"
    )
    assert wrong.status_code == 200
    assert not logged_in(client)

    TOTPDevice.objects.update(throttling_failure_count=0)  # django-otp's own backoff
    assert login(client, "operator", token_of(key)).status_code == 302
    assert logged_in(client)


def test_wrong_tokens_are_throttled_by_the_device(client, settings, operator):
    settings.ADMIN_TWO_FACTOR = "offered"
    key = enrol("operator")
    wrong = "000000" if token_of(key) != "000000" else "111111"
    login(client, "operator", wrong)
    login(client, "operator", wrong)
    # Right at once after two failures: refused by django-otp's backoff (1 s, then 2 s, ...).
    response = login(client, "operator", token_of(key))
    assert response.status_code == 200
    assert not logged_in(client)


def test_superusers_must_have_a_device_when_required(client, settings, root, operator):
    settings.ADMIN_TWO_FACTOR = "superusers"
    refused = login(client, "root")
    assert refused.status_code == 200
    assert b"admin_2fa enrol" in refused.content
    assert not logged_in(client)
    # Other staff are only offered it.
    assert login(client, "operator").status_code == 302

    client.logout()
    key = enrol("root")
    assert login(client, "root", token_of(key)).status_code == 302
    assert logged_in(client)


def test_every_staff_user_must_have_a_device_in_staff_mode(client, settings, operator):
    settings.ADMIN_TWO_FACTOR = "staff"
    assert login(client, "operator").status_code == 200
    assert not logged_in(client)
    key = enrol("operator")
    assert login(client, "operator", token_of(key)).status_code == 302
    assert logged_in(client)


def test_a_session_not_verified_by_a_device_is_not_let_in(client, settings, root):
    # Logged in some other way (a session from before the setting, say): the admin asks
    # for the second factor again.
    settings.ADMIN_TWO_FACTOR = "superusers"
    client.force_login(root)
    response = client.get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_off_asks_no_token_even_with_a_device(client, settings, operator):
    settings.ADMIN_TWO_FACTOR = "off"
    enrol("operator")
    assert login(client, "operator").status_code == 302
    assert logged_in(client)


def test_enrol_replaces_only_when_asked_and_remove_removes(operator):
    enrol("operator")
    with pytest.raises(CommandError, match="--replace"):
        enrol("operator")
    out = io.StringIO()
    call_command("admin_2fa", "enrol", "operator", "--replace", stdout=out)
    assert TOTPDevice.objects.filter(user=operator).count() == 1
    call_command("admin_2fa", "remove", "operator", stdout=io.StringIO())
    assert not TOTPDevice.objects.filter(user=operator).exists()
    with pytest.raises(CommandError, match="no user"):
        call_command("admin_2fa", "enrol", "nobody", stdout=io.StringIO())


def test_the_secret_is_printed_once_and_never_listed(operator):
    key = enrol("operator")
    out = io.StringIO()
    call_command("admin_2fa", "list", stdout=out)
    listed = out.getvalue()
    assert "operator" in listed
    assert base64.b32encode(key).decode().rstrip("=") not in listed
    assert key.hex() not in listed
