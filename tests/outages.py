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


@contextlib.contextmanager
def broker_unreachable() -> Iterator[None]:
    """Inside, every message this thread publishes through Celery's current app goes to a
    closed port, and fails once the app's publish retries run out; outside, the project's
    app is current again. (Celery lets the ``CELERY_BROKER_URL`` environment variable win
    over an app's configuration: it points at the closed port too while inside.)"""
    import os

    from celery import Celery, current_app

    from tests.processes import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    previous = current_app._get_current_object()
    environment = os.environ.get("CELERY_BROKER_URL")
    os.environ["CELERY_BROKER_URL"] = url
    app = Celery("unreachable", broker=url, set_as_current=False)
    app.set_current()
    try:
        yield
    finally:
        previous.set_current()
        app.close()
        if environment is None:
            os.environ.pop("CELERY_BROKER_URL", None)
        else:
            os.environ["CELERY_BROKER_URL"] = environment
