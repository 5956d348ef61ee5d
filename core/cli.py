"""What the management commands share."""

from __future__ import annotations

import sys

from django.core.management.base import CommandError

# ``--secret-file -``: read standard input.
STANDARD_INPUT = "-"


def secret_option_read(value: str | None, path: str | None, *, name: str) -> str | None:
    """A secret (or token) given as ``--<name> VALUE`` or in a file, ``--<name>-file PATH``
    (its first line; ``-`` reads standard input), so that it need not stand on a command line
    (in the shell's history, in ``ps``). ``None`` when neither is given."""
    if value is not None and path is not None:
        raise CommandError(f"give --{name} or --{name}-file, not both")
    if path is None:
        return value
    try:
        if path == STANDARD_INPUT:
            text = sys.stdin.readline()
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"--{name}-file: {exc}") from None
    text = text.rstrip("\r\n")
    if not text:
        raise CommandError(f"--{name}-file: nothing in it")
    return text
