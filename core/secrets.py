"""Secrets and tokens as values (docs/security.md, "Secrets"): what makes one unusable, the
check of the settings that hold them at every process's start, and the scrubbing of every form
of one from a text the product keeps (an error, a log line).

A token with a stray character (a paste's trailing space, the CR of a CRLF env file) makes
an HTTP client refuse the header it is sent in, with an error that quotes the header; such a
value is refused where it is set, and whatever quotes one anyway is scrubbed before it is
kept."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# What a scrubbed secret reads as.
REDACTED = "[redacted]"

# The settings that hold a secret, by the environment variable each is read from.
SECRET_SETTINGS: dict[str, str] = {
    "SECRET_KEY": "DJANGO_SECRET_KEY",
    "AUDIT_SEAL_KEY": "AUDIT_SEAL_KEY",
    "AUDIT_SIGNING_KEY": "AUDIT_SIGNING_KEY",
    "DEPLOY_HTTP_SECRET": "DEPLOY_HTTP_SECRET",
    "GITHUB_TOKEN": "GITHUB_TOKEN",
}

# Unicode's control characters (C0, DEL, C1), and those that show as nothing: format
# characters (a byte order mark, a zero-width space) and line or paragraph separators.
_CONTROL = frozenset({"Cc"})
_INVISIBLE = frozenset({"Cf", "Zl", "Zp"})


def secret_problem(value: str) -> str:
    """What makes ``value`` unusable as a secret or a token, in words that never quote it:
    ``"contains a control character (U+000D)"``, ``"has a trailing space"``, ``"has a
    leading space"``; ``""`` when nothing does. A space inside is allowed (a header value may
    hold one); around it, as any control character, it is a paste's or a file's leftover
    that would be sent (or refused by the HTTP client, quoting the header) as part of it."""
    for char in value:
        category = unicodedata.category(char)
        if category in _CONTROL:
            return f"contains a control character (U+{ord(char):04X})"
        if category in _INVISIBLE:
            return f"contains an invisible character (U+{ord(char):04X})"
    if value != value.rstrip():
        return "has a trailing space"
    if value != value.lstrip():
        return "has a leading space"
    return ""


def secret_settings_check() -> None:
    """Raises ``ImproperlyConfigured`` naming every secret setting (by its environment
    variable) whose value ``secret_problem`` refuses, and the problem; never the value. Run
    by every process as it starts (``core.apps``)."""
    problems = []
    for name, variable in SECRET_SETTINGS.items():
        value = getattr(settings, name, "") or ""
        problem = secret_problem(value) if isinstance(value, str) else ""
        if problem:
            problems.append(f"{variable} {problem}")
    if problems:
        raise ImproperlyConfigured(
            "; ".join(problems)
            + ": set it again without it (a secret is never sent or stored with a stray "
            "character; an env file with CRLF line ends leaves a CR at the end of each "
            "value)"
        )


def settings_secrets() -> list[str]:
    """The values of the secret settings that are set: scrubbed from every text kept of an
    outbound call or an executor's error, whoever forgot to name them."""
    values = (getattr(settings, name, "") for name in SECRET_SETTINGS)
    return [value for value in values if isinstance(value, str) and value.strip()]


def secret_forms(secret: str) -> set[str]:
    """Every form in which ``secret`` may stand in a text: as is, stripped, escaped as a
    Python ``str`` or ``bytes`` repr shows it (an HTTP client's "Illegal header value
    b'Bearer ...\\r'"), as JSON shows it, percent-encoded (in a URL). Empty forms are left
    out."""
    forms = set()
    for value in {secret, secret.strip()}:
        if not value:
            continue
        forms.update(
            {
                value,
                repr(value)[1:-1],
                value.encode("unicode_escape").decode("ascii"),
                repr(value.encode("utf-8"))[2:-1],
                json.dumps(value)[1:-1],
                json.dumps(value, ensure_ascii=False)[1:-1],
                quote(value, safe=""),
                quote_plus(value, safe=""),
            }
        )
    return {form for form in forms if form.strip()}


def secrets_scrubbed(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every form of each of ``secrets`` (``secret_forms``) replaced by
    ``REDACTED``, the longest first (a header value ``Bearer <token>`` before the token in
    it)."""
    forms: set[str] = set()
    for secret in secrets:
        if secret:
            forms |= secret_forms(secret)
    if not text or not forms:
        return text
    pattern = re.compile(
        "|".join(re.escape(form) for form in sorted(forms, key=len, reverse=True))
    )
    return pattern.sub(REDACTED, text)
