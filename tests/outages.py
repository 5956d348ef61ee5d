"""Outages for tests, made real: a connection attempt to a closed port, not a mocked failure."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection


@contextlib.contextmanager
def database_unreachable() -> Iterator[None]:
    """Inside, every new connection of this thread to the database is refused; outside, the
    database is back (the next query reconnects)."""
    original_port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["PORT"] = original_port
