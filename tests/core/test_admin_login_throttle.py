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


# --- Guesses spread over addresses, or over usernames ---------------------------------------


def attempt(client, username, password, address):
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password},
        REMOTE_ADDR=address,
    )


def age_attempts(seconds: float) -> None:
    """Every recorded failure ``seconds`` older, as if that much time had passed."""
    from datetime import timedelta

    from axes.models import AccessAttempt
    from django.db.models import F

    AccessAttempt.objects.update(
        attempt_time=F("attempt_time") - timedelta(seconds=seconds)
    )


@pytest.fixture
def throttled(settings):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = 5
    settings.ADMIN_LOGIN_WIDE_FAILURE_LIMIT = 20
    settings.ADMIN_LOGIN_WIDE_COOLOFF_SECONDS = 60
    return settings


def test_guesses_at_one_username_from_many_addresses_lock_the_username(
    client, throttled, staff_user
):
    # Eleven addresses, five guesses each, used to be 55 guesses with no lockout. Now the
    # username alone locks after 20 failures, from wherever they came.
    for n in range(4):
        for _ in range(5):
            attempt(client, "operator", "wrong", f"198.51.100.{n}")
    fresh = attempt(client, "operator", "correct-horse-battery", "203.0.113.50")
    assert fresh.status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_username_lockout_is_progressive(client, throttled, staff_user):
    def right(address="203.0.113.9"):
        return attempt(client, "operator", "correct-horse-battery", address).status_code

    for n in range(20):
        attempt(client, "operator", "wrong", f"198.51.100.{n // 5}")
    assert right() == 429
    # The first lockout lasts ADMIN_LOGIN_WIDE_COOLOFF_SECONDS: short, so that a burst of
    # guesses keeps the real user out for a minute, not for the whole cool-off.
    age_attempts(61)
    # One more guess, and the next lockout is twice as long.
    assert attempt(client, "operator", "wrong", "198.51.100.60").status_code == 200
    assert right() == 429
    # Guesses refused during a lockout are not counted: it still ends on time.
    for n in range(3):
        assert (
            attempt(client, "operator", "wrong", f"198.51.100.7{n}").status_code == 429
        )
    age_attempts(61)
    assert right() == 429
    age_attempts(60)
    assert right() == 302
    assert client.session["_auth_user_id"] == str(staff_user.pk)


def test_the_lockout_doubles_up_to_the_cool_off(throttled):
    from datetime import timedelta

    from core.login_throttle import wide_lockout_duration

    assert wide_lockout_duration(20) == timedelta(seconds=60)
    assert wide_lockout_duration(21) == timedelta(seconds=120)
    assert wide_lockout_duration(23) == timedelta(seconds=480)
    assert wide_lockout_duration(24) == timedelta(minutes=15)  # AXES_COOLOFF_TIME
    assert wide_lockout_duration(10_000) == timedelta(minutes=15)


def test_spraying_one_password_over_many_usernames_from_one_address_is_throttled(
    client, throttled, staff_user
):
    for n in range(20):
        attempt(client, f"user{n}", "Summer2026!", "198.51.100.77")
    # That address is locked out for every username; another address is not.
    assert (
        attempt(
            client, "operator", "correct-horse-battery", "198.51.100.77"
        ).status_code
        == 429
    )
    assert (
        attempt(client, "operator", "correct-horse-battery", "203.0.113.8").status_code
        == 302
    )


def test_ipv6_addresses_are_throttled_on_their_64(client, throttled, staff_user):
    # One host holds a whole /64: every address in it is the same client.
    for n in range(5):
        attempt(client, "operator", "wrong", f"2001:db8:1:2::{n + 1:x}")
    locked = attempt(
        client, "operator", "correct-horse-battery", "2001:db8:1:2:ffff::1"
    )
    assert locked.status_code == 429
    other = attempt(client, "operator", "correct-horse-battery", "2001:db8:1:3::1")
    assert other.status_code == 302


def test_an_ipv4_mapped_address_is_its_ipv4_address(throttled):
    from django.test import RequestFactory

    from core.security import client_ip

    request = RequestFactory().get("/", REMOTE_ADDR="::ffff:198.51.100.7")
    assert client_ip(request) == "198.51.100.7"
    request = RequestFactory().get("/", REMOTE_ADDR="2001:db8:1:2:3:4:5:6")
    assert client_ip(request) == "2001:db8:1:2::"
