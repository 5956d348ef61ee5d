"""A secret or token with a stray character (a leading or trailing space, a CR from a CRLF
env file, a LF, a tab, a NUL) is refused where it is set: the rule itself, and the check of
the secret settings that every process runs as it starts (the processes themselves are
started in tests/core/test_settings.py). The message names the variable and the problem,
never the value (docs/security.md, "Secrets", "A stray character is refused where it is
set")."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.secrets import secret_problem, secret_settings_check

GITHUB_TOKEN = "ghp_startcheck_0123456789abcdefABCDEF"
HTTP_SECRET = "whsec_0snSPuSyuVpC58vLvZHhJ9zhTQStWIA3kuIC6sLEFjk="
# The characters a paste, a CRLF env file or a careless editor leave behind.
STRAY = {"space": " ", "cr": "\r", "lf": "\n", "tab": "\t", "nul": "\x00"}
# An environment cannot carry a NUL (the operating system refuses it): the processes of
# tests/core/test_settings.py are started with the others, and the check itself is shown
# here to refuse a NUL as well.
PROBLEMS = {
    "space": "has a trailing space",
    "cr": "contains a control character",
    "lf": "contains a control character",
    "tab": "contains a control character",
    "nul": "contains a control character",
}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("ghp_fine_token_0123456789", ""),
        ("ghp_inner space is not a paste accident", ""),
        (" ghp_leading", "has a leading space"),
        ("ghp_trailing ", "has a trailing space"),
        ("ghp_trailing\u00a0", "has a trailing space"),
        ("ghp_cr\r", "contains a control character (U+000D)"),
        ("ghp_crlf\r\n", "contains a control character (U+000D)"),
        ("ghp_lf\n", "contains a control character (U+000A)"),
        ("ghp_tab\t", "contains a control character (U+0009)"),
        ("ghp_nul\x00", "contains a control character (U+0000)"),
        ("ghp_del\x7f", "contains a control character (U+007F)"),
        ("ghp_c1\x85", "contains a control character (U+0085)"),
        ("\ufeffghp_bom", "contains an invisible character (U+FEFF)"),
        ("ghp_zero\u200bwidth", "contains an invisible character (U+200B)"),
    ],
)
def test_what_makes_a_secret_unusable_is_said_without_it(value, problem):
    assert secret_problem(value) == problem


@pytest.mark.parametrize("name", STRAY)
@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("GITHUB_TOKEN", GITHUB_TOKEN),
        ("DEPLOY_HTTP_SECRET", HTTP_SECRET),
        ("SECRET_KEY", "test-insecure-key-6c1d9e0a2b3f4c5d6e7f8a9b0c1d2e3f"),
        ("AUDIT_SEAL_KEY", "test-only-audit-seal-key-1a2b3c4d5e6f7a8b9c0d"),
    ],
)
def test_the_check_at_start_refuses_every_stray_character(
    settings, setting, value, name
):
    setattr(settings, setting, value + STRAY[name])
    with pytest.raises(ImproperlyConfigured) as refused:
        secret_settings_check()
    message = str(refused.value)
    assert PROBLEMS[name] in message
    assert value not in message


def test_unset_secrets_and_clean_ones_pass(settings):
    settings.GITHUB_TOKEN = ""
    settings.DEPLOY_HTTP_SECRET = HTTP_SECRET
    secret_settings_check()
