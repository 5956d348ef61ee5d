"""What a trigger started downstream (docs/http-api.md, "What a trigger started"): the
``downstream`` of a job and of the attempt that delivered it,
``{"system": "github"|"github-actions"|"http", "id": ..., "url": ...}``.

GitHub's ids are GitHub's integers; an ``http`` receiver names its own in its 2xx JSON answer
(the documented convention: a top-level ``id``, a string or an integer, and ``url``, an
http(s) URL). What a receiver says is kept only in a shape every reader can trust: an id of
at most ``ID_MAX_LENGTH`` printable characters (or an integer of 64 bits), a URL without user
information, query or fragment (a token in a run's link is never recorded:
docs/security.md, "Secrets"); anything else is left out, and an answer naming neither is no
downstream at all (``None``)."""

from __future__ import annotations

import json
from typing import Any, TypedDict
from urllib.parse import urlsplit

from .trigger_urls import url_credential_errors, url_scheme_errors, url_shown

GITHUB_ACTIONS = "github-actions"
SYSTEMS: frozenset[str] = frozenset({"github", GITHUB_ACTIONS, "http"})

ID_MAX_LENGTH = 200
URL_MAX_LENGTH = 500
_INT64 = 2**63


class Downstream(TypedDict):
    system: str
    id: str | int | None
    url: str | None


def downstream_id(value: Any) -> str | int | None:
    """``value`` as a downstream id, or ``None`` when it cannot be one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else None
    if (
        isinstance(value, str)
        and 0 < len(value) <= ID_MAX_LENGTH
        and value.isprintable()
        and value.strip()
    ):
        return value
    return None


def downstream_url(value: Any) -> str | None:
    """``value`` as a downstream link: an http(s) URL with a host and no user information,
    kept without its query and fragment; ``None`` for anything else."""
    if not isinstance(value, str) or not value or len(value) > URL_MAX_LENGTH:
        return None
    if not value.isprintable() or any(c.isspace() for c in value):
        return None
    if url_scheme_errors(value) or url_credential_errors(value):
        return None
    try:
        urlsplit(value).port  # noqa: B018 (a port that is no number raises)
    except ValueError:
        return None
    return url_shown(value)


def downstream_make(*, system: str, id: Any, url: Any = None) -> Downstream | None:
    """A downstream of ``system``, its id and URL checked; ``None`` when neither holds."""
    if system not in SYSTEMS:
        raise ValueError(f"no downstream system {system!r}")
    checked_id, checked_url = downstream_id(id), downstream_url(url)
    if checked_id is None and checked_url is None:
        return None
    return {"system": system, "id": checked_id, "url": checked_url}


def downstream_of_answer(body: bytes) -> Downstream | None:
    """What an ``http`` receiver's 2xx answer says it started: its top-level ``id`` and
    ``url``, if the answer is a JSON object naming either."""
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(answer, dict):
        return None
    return downstream_make(system="http", id=answer.get("id"), url=answer.get("url"))
