"""The log's signing key as a user configures it: separate processes, real environments."""

import pytest

from tests.core.test_settings import PRODUCTION_ENV
from tests.processes import manage

pytestmark = pytest.mark.slow


def test_production_refuses_to_start_without_the_signing_key():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "AUDIT_SIGNING_KEY"}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "AUDIT_SIGNING_KEY" in result.stderr


@pytest.mark.parametrize(
    "key",
    [
        "short",
        # The key id does not match the key.
        "PRIVATE+KEY+inbox.example.com/audit-log+d9b4753c+"
        "AVGtE5mdOff6/e6m6toqm4J0sRAtV+/7yVVtGekCj18p",
    ],
)
def test_production_refuses_a_malformed_signing_key_without_printing_it(key):
    result = manage("check", env={**PRODUCTION_ENV, "AUDIT_SIGNING_KEY": key})
    assert result.returncode != 0
    assert "AUDIT_SIGNING_KEY is not usable" in result.stderr
    assert "AVGtE5mdOff6" not in result.stderr + result.stdout


def test_production_refuses_an_origin_that_is_not_the_key_s_name():
    env = {**PRODUCTION_ENV, "AUDIT_LOG_ORIGIN": "staging.example.com/audit-log"}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "AUDIT_LOG_ORIGIN" in result.stderr


def test_audit_keygen_prints_a_key_pair_that_production_accepts():
    result = manage(
        "audit_keygen",
        "inbox.example.org/log",
        env={**PRODUCTION_ENV, "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    skey = lines[-1]
    assert skey.startswith("PRIVATE+KEY+inbox.example.org/log+")
    assert any(
        line.startswith("verifier key: inbox.example.org/log+") for line in lines
    )
    check = manage(
        "check",
        env={
            **PRODUCTION_ENV,
            "AUDIT_SIGNING_KEY": skey,
            "AUDIT_LOG_ORIGIN": "inbox.example.org/log",
        },
    )
    assert check.returncode == 0, check.stderr
