import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_user():
    return get_user_model().objects.create_user(
        "operator", password="correct-horse-battery", is_staff=True
    )


def login(client, username, password):
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password},
        REMOTE_ADDR="203.0.113.7",
    )


def test_admin_login_is_locked_after_repeated_failures(client, settings, staff_user):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 3
    for _ in range(3):
        response = login(client, "operator", "wrong")
        assert response.status_code in (200, 429)
    # Locked now: even the right password is refused, with 429.
    response = login(client, "operator", "correct-horse-battery")
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_a_successful_login_below_the_limit_works_and_resets(
    client, settings, staff_user
):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 3
    login(client, "operator", "wrong")
    response = login(client, "operator", "correct-horse-battery")
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(staff_user.pk)


def test_behind_a_trusted_proxy_each_client_address_is_throttled_on_its_own(
    client, settings, staff_user
):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 2
    settings.TRUSTED_PROXY_COUNT = 1

    def attempt(forwarded_for, password):
        return client.post(
            "/admin/login/?next=/admin/",
            {"username": "operator", "password": password},
            REMOTE_ADDR="10.0.0.2",  # the proxy
            HTTP_X_FORWARDED_FOR=forwarded_for,
        )

    # The client forges entries on the left; the proxy appends the address it saw.
    attempt("1.1.1.1, 198.51.100.1", "wrong")
    attempt("2.2.2.2, 198.51.100.1", "wrong")
    assert attempt("3.3.3.3, 198.51.100.1", "correct-horse-battery").status_code == 429
    # Another client behind the same proxy is not locked out by the first one's failures.
    assert attempt("198.51.100.2", "correct-horse-battery").status_code == 302
