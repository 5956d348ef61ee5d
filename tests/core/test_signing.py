"""Standard Webhooks signing in core: the published vector, the reference library, and the
inbox's scheme signing with the same function."""

import time

import pytest
from standardwebhooks.webhooks import Webhook

from core.signing import standard_webhooks_sign, whsec_problem
from webhooks.schemes import scheme_get

SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIMESTAMP = 1614265330
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_signing_gives_the_published_vector_that_the_reference_library_verifies():
    headers = standard_webhooks_sign(
        body=SW_BODY, secret=SW_SECRET, message_id=SW_ID, timestamp=SW_TIMESTAMP
    )
    assert headers == {
        "webhook-id": SW_ID,
        "webhook-timestamp": str(SW_TIMESTAMP),
        "webhook-signature": SW_SIGNATURE,
    }
    assert (
        scheme_get("standard-webhooks").sign(
            raw_body=SW_BODY, secret=SW_SECRET, event_id=SW_ID, timestamp=SW_TIMESTAMP
        )
        == headers
    )


def test_a_message_signed_now_verifies_with_the_reference_library():
    now = int(time.time())
    headers = standard_webhooks_sign(
        body=SW_BODY, secret=SW_SECRET, message_id="job-1", timestamp=now
    )
    assert Webhook(SW_SECRET).verify(SW_BODY, headers) == {"test": 2432232314}


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        ("whsec_" + "A" * 32, ""),
        ("whsec_" + "A" * 32 + " ", "the secret"),
        ("whpk_" + "A" * 44, "whsec_<base64>"),
        ("whsec_not base64!", "whsec_<base64>"),
        ("whsec_" + "A" * 16, "24 to 64 bytes"),
    ],
)
def test_a_secret_that_is_no_whsec_secret_is_named_never_quoted(secret, problem):
    found = whsec_problem(secret)
    assert (problem in found) if problem else found == ""
    assert secret.removeprefix("whsec_") not in found
