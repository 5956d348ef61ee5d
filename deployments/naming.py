"""A job's ``repository`` as GitHub names repositories (docs/http-api.md, "Deployments and
builds"): ``owner/name``, each part 1 to 100 of ``A-Z a-z 0-9 . _ -``, neither part ``.`` nor
``..``. The API refuses any other (422), and the ``github`` executor puts the name into a URL
path (``/repos/<repository>/deployments``) only when it is one: a ``..`` part would move the
token's request to another API path (docs/security.md, "Deploy targets").

One pattern, without look-arounds, so that it reads the same in Python, in the OpenAPI
schema (ECMA-262) and in the generators that draw from it: a part starts with a character
other than a dot, or is a dot and such a character, or two dots and at least one more."""

from __future__ import annotations

import re

_CHARACTER = "[A-Za-z0-9._-]"
_NOT_A_DOT = "[A-Za-z0-9_-]"
REPOSITORY_PART = (
    f"(?:{_NOT_A_DOT}{_CHARACTER}{{0,99}}"
    f"|\\.{_NOT_A_DOT}{_CHARACTER}{{0,98}}"
    f"|\\.\\.{_CHARACTER}{{1,98}})"
)
REPOSITORY_PATTERN = f"{REPOSITORY_PART}/{REPOSITORY_PART}"
# The column holds 200 characters: two parts of 100 each are one too many.
REPOSITORY_MAX_LENGTH = 200

_REPOSITORY = re.compile(REPOSITORY_PATTERN)


def repository_is_valid(name: str) -> bool:
    """``owner/name`` as GitHub allows it, and no longer than the column."""
    return len(name) <= REPOSITORY_MAX_LENGTH and bool(_REPOSITORY.fullmatch(name))
