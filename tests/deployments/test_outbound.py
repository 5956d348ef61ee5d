"""The one classification of a trigger attempt's end (``deployments.outbound``), per status
code and per exception class; the exceptions of real calls against a real server are checked
in tests/deployments/test_triggers.py."""

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from django.test import override_settings

from core.actors import Actor
from deployments import outbound
from deployments.models import DeployTarget
from deployments.outbound import (
    DeniedDestination,
    destination_check,
    outcome_classify,
    retry_after_seconds,
)
from deployments.services.attempts import trigger_retry_delay
from deployments.targets import (
    deploy_target_save,
    deploy_target_test_request,
    deploy_target_test_run,
)
from deployments.trigger_urls import url_shown
from deployments.triggers import post_signed
from tests.deployments.receiver import RECEIVER_SECRET
from tests.deployments.trickler import LATE_SECONDS, Trickler

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, "delivered"),
        (201, "delivered"),
        (202, "delivered"),
        (204, "delivered"),
        (299, "delivered"),
        (301, "rejected"),
        (302, "rejected"),
        (307, "rejected"),
        (400, "rejected"),
        (401, "rejected"),
        (403, "rejected"),
        (404, "rejected"),
        (405, "rejected"),
        (409, "rejected"),
        (410, "rejected"),
        (413, "rejected"),
        (422, "rejected"),
        (408, "transient"),
        (425, "transient"),
        (429, "transient"),
        (503, "transient"),
        (500, "ambiguous"),
        (501, "ambiguous"),
        (502, "ambiguous"),
        (504, "ambiguous"),
        (599, "ambiguous"),
    ],
)
def test_each_status_code_is_classified_once(status, outcome):
    classified = outcome_classify(status_code=status, headers={})
    assert classified.outcome == outcome
    assert classified.status_code == status


def test_a_redirect_says_it_is_not_followed():
    assert "not followed" in outcome_classify(status_code=302, headers={}).error


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "60"},
        {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1796140860"},
    ],
)
def test_a_github_rate_limit_403_is_transient(headers):
    assert outcome_classify(status_code=403, headers=headers).outcome == "transient"


def test_a_plain_403_is_rejected():
    headers = {"x-ratelimit-remaining": "4999"}
    assert outcome_classify(status_code=403, headers=headers).outcome == "rejected"


def _request() -> httpx.Request:
    return httpx.Request("POST", "http://ci.example/hook")


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), "transient"),
        (httpx.ConnectTimeout("timed out"), "transient"),
        (httpx.PoolTimeout("no connection"), "transient"),
        (httpx.ProxyError("proxy refused"), "transient"),
        (httpx.ReadTimeout("timed out"), "ambiguous"),
        (httpx.WriteTimeout("timed out"), "ambiguous"),
        (httpx.ReadError("connection reset"), "ambiguous"),
        (httpx.WriteError("broken pipe"), "ambiguous"),
        (
            httpx.RemoteProtocolError(
                "Server disconnected without sending a response."
            ),
            "ambiguous",
        ),
        (httpx.DecodingError("bad gzip"), "ambiguous"),
        (httpx.UnsupportedProtocol("ftp"), "rejected"),
        (httpx.InvalidURL("bad url"), "rejected"),
        (httpx.LocalProtocolError("illegal header"), "rejected"),
        (DeniedDestination("169.254.169.254"), "rejected"),
        (RuntimeError("a bug"), "ambiguous"),
        (OSError("something else"), "ambiguous"),
    ],
)
def test_each_exception_class_is_classified_once(error, outcome):
    classified = outcome_classify(error=error)
    assert classified.outcome == outcome
    assert classified.error_class == type(error).__name__
    assert classified.status_code is None


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        (
            {"retry-after": format_datetime(NOW + timedelta(seconds=30), usegmt=True)},
            30,
        ),
        ({"retry-after": format_datetime(NOW - timedelta(seconds=30), usegmt=True)}, 0),
        ({"retry-after": "soon"}, None),
        ({}, None),
        (
            {
                "x-ratelimit-remaining": "0",
                "x-ratelimit-reset": str(int(NOW.timestamp()) + 90),
            },
            90,
        ),
        ({"x-ratelimit-remaining": "3", "x-ratelimit-reset": "1"}, None),
    ],
)
def test_retry_after_in_seconds_or_as_a_date(headers, seconds):
    assert retry_after_seconds(headers, now=NOW) == seconds


def test_a_429_carries_its_retry_after():
    classified = outcome_classify(
        status_code=429, headers={"retry-after": "12"}, now=NOW
    )
    assert classified.retry_after == 12


@override_settings(
    DEPLOY_TRIGGER_RETRY_BASE_SECONDS=2, DEPLOY_TRIGGER_RETRY_MAX_SECONDS=600
)
def test_retry_delays_back_off_with_full_jitter_and_honour_retry_after():
    for attempt, ceiling in [(1, 2), (2, 4), (3, 8), (8, 256), (12, 600), (100, 600)]:
        delays = [trigger_retry_delay(attempt=attempt) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling / 2  # spread over the range, not a constant
    assert trigger_retry_delay(attempt=1, retry_after=30) == 30
    assert trigger_retry_delay(attempt=1, retry_after=10_000) == 600


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/hook",
        "http://0.0.0.0:8080/hook",
        "ftp://ci.example/hook",
        "not a url",
    ],
)
def test_denied_destinations_are_refused(url):
    with pytest.raises(DeniedDestination):
        destination_check(url)


@pytest.mark.parametrize(
    "url",
    [
        # IPv4-mapped, as a dotted quad and in hex (::ffff:0:0/96)
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://[::ffff:0.0.0.0]:8080/hook",
        # IPv4-compatible (::/96, deprecated) and IPv4-translated (::ffff:0:0:0/96)
        "http://[::169.254.169.254]/",
        "http://[::ffff:0:a9fe:a9fe]/",
        # NAT64: the well-known prefix, and the local-use /48 as a /48 and as a /96
        "http://[64:ff9b::169.254.169.254]/",
        "http://[64:ff9b:1:a9fe:a9:fe00::]/",
        "http://[64:ff9b:1::a9fe:a9fe]/",
        # 6to4 and Teredo (its client address, obfuscated in the address)
        "http://[2002:a9fe:a9fe::1]/",
        "http://[2001:0:4136:e378::5601:5601]/",
        # IPv4 as the system's resolver reads it: one number, short forms, hex, octal
        "http://2852039166/",
        "http://169.254.43518/",
        "http://169.16689662/",
        "http://0xa9fea9fe/",
        "http://0251.0376.0251.0376/",
    ],
)
def test_every_form_of_a_denied_address_is_refused(url):
    with pytest.raises(DeniedDestination, match=r"169\.254\.169\.254|0\.0\.0\.0"):
        destination_check(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "https://10.1.2.3/hook",
        "http://[::1]:8080/",
        "http://[::ffff:10.1.2.3]/hook",
        "http://[64:ff9b::10.1.2.3]/hook",
        "http://[2002:a01:203::1]/hook",
    ],
)
def test_loopback_and_private_destinations_are_allowed(url):
    destination_check(url)  # a receiver in the cluster is the common case


@override_settings(DEPLOY_TRIGGER_DENY_NETWORKS=["127.0.0.0/8"])
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/",
        "http://[::ffff:127.0.0.1]:9/",
        "http://[::ffff:7f00:1]:9/",
        "http://2130706433:9/",
        "http://localhost:9/",
    ],
)
def test_a_denied_network_is_refused_in_every_form_of_its_addresses(url):
    with pytest.raises(DeniedDestination, match=r"127\.0\.0\.1"):
        destination_check(url)


@override_settings(DEPLOY_TRIGGER_DENY_NETWORKS=["::ffff:10.0.0.0/104"])
def test_an_ipv4_address_is_refused_by_a_denied_network_of_its_mapped_form():
    with pytest.raises(DeniedDestination):
        destination_check("https://10.1.2.3/hook")


@override_settings(DEPLOY_TRIGGER_DENY_NETWORKS=["10.0.0.0/8"])
def test_the_deny_list_is_a_setting():
    with pytest.raises(DeniedDestination):
        destination_check("https://10.1.2.3/hook")
    destination_check("http://169.254.169.254/")


def test_urls_are_shown_without_credentials_or_query():
    assert (
        url_shown(
            "https://user:pw@jenkins.example:8443/generic-webhook-trigger/invoke?token=s3cret#x"
        )
        == "https://jenkins.example:8443/generic-webhook-trigger/invoke"
    )


# A receiver that trickles its answer a byte at a time (tests/deployments/trickler.py): no
# read ever waits as long as the timeout, and the call still ends at it.


@pytest.mark.slow
def test_a_trickled_answer_ends_a_trigger_at_the_timeout(settings):
    settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 1
    with Trickler(part="headers", interval=0.2) as trickler:
        started = time.monotonic()
        result = post_signed(
            url=trickler.url, secret=RECEIVER_SECRET, message_id="msg_1", body=b"{}"
        )
        took = time.monotonic() - started
    assert (result.outcome, result.error_class) == ("ambiguous", "ReadTimeout")
    assert took < 1 + LATE_SECONDS < trickler.lasts(), took
    assert trickler.connections[0].request_line == "POST /hooks/deploy HTTP/1.1"


@pytest.mark.slow
def test_a_trickled_body_ends_the_read_at_the_timeout(settings):
    settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 1
    with Trickler(part="body", interval=0.2) as trickler:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            outbound.call(
                outbound.http_client(), "GET", trickler.url, headers={}, read_body=True
            )
        took = time.monotonic() - started
    assert took < 1 + LATE_SECONDS < trickler.lasts(), took


@pytest.mark.slow
@pytest.mark.django_db
def test_a_test_trigger_to_a_trickling_receiver_ends_at_the_timeout(settings):
    settings.DEPLOY_HTTP_TIMEOUT_SECONDS = 1
    with Trickler(part="headers", interval=0.2) as trickler:
        target = DeployTarget(name="slow", executor="http", url=trickler.url)
        deploy_target_save(target=target, secret=RECEIVER_SECRET, actor=Actor.system())
        test = deploy_target_test_request(target=target, actor=Actor.system())
        assert test is not None
        started = time.monotonic()
        outcome = deploy_target_test_run(test_id=test.pk, worker="test-worker")
        took = time.monotonic() - started
    assert outcome == "not_reached"
    assert took < 1 + LATE_SECONDS < trickler.lasts(), took
