"""Reading and clearing the test broker (Redis) directly, to count what was published; and the
brokers the broker-dependent tests run on."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings

from tests import processes

QUEUE = "celery"


def redis_client() -> redis.Redis:
    return _redis_client(settings.CELERY_BROKER_URL)


@functools.cache
def _redis_client(url: str) -> redis.Redis:
    """One client (and its connection pool) per URL, kept: connecting again for every read
    cost more than the read."""
    return redis.Redis.from_url(url)


def broker_reset() -> None:
    """Empties the queue and forgets unacked messages of killed workers from earlier runs."""
    processes.purge_broker()
    client = redis_client()
    client.delete("unacked", "unacked_index", "unacked_mutex")


def queued_envelopes(queue: str = QUEUE) -> list[dict]:
    """The raw Celery messages waiting in the queue (headers, properties, encoded body), in
    the order they were published (the transport pushes on the left, workers pop on the
    right)."""
    raw_messages = redis_client().lrange(queue, 0, -1)
    return [json.loads(raw) for raw in reversed(raw_messages)]


def broker_messages(queue: str = QUEUE) -> list[dict]:
    """The messages waiting in the queue: task name, args and headers."""
    found = []
    for message in queued_envelopes(queue):
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        found.append(
            {
                "task": message["headers"]["task"],
                "args": args,
                "headers": message["headers"],
            }
        )
    return found


PROCESS_TASK = "webhooks.process_inbox_events"  # one message: a list of inbox row ids


def inbox_messages(queue: str = QUEUE) -> list[dict]:
    """The processing messages waiting in the queue."""
    return [m for m in broker_messages(queue) if m["task"] == PROCESS_TASK]


def message_inbox_event_ids(message: dict) -> list[int]:
    """The inbox row ids one processing message carries."""
    return list(message["args"][0])


def queued_inbox_event_ids() -> list[int]:
    """The inbox row ids of the processing messages waiting in the queue, in the order they
    were published: an id published twice appears twice."""
    return [pk for m in inbox_messages() for pk in message_inbox_event_ids(m)]


# --- the brokers the product runs on -------------------------------------------------------
# Redis and RabbitMQ both carry the product's messages in production; the tests whose behaviour
# depends on the broker (a round trip, a worker killed mid-batch, a relay killed) run on each.
RABBITMQ_URL = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
RABBITMQCTL = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"


def broker_urls() -> dict[str, str]:
    return {"redis": settings.CELERY_BROKER_URL, "rabbitmq": RABBITMQ_URL}


@contextlib.contextmanager
def broker_for_test(name: str) -> Iterator[str]:
    """The broker ``name`` for one test, empty, and left empty.

    On RabbitMQ each test has a virtual host of its own, deleted at the end: deleting it closes
    every connection still open on it and drops its queues. Purging one shared queue was not
    enough: RabbitMQ puts a killed worker's unacknowledged messages back in the queue when it
    closes the worker's channel, which can be just after the next test's purge, and that test's
    workers then took the earlier test's messages first.
    """
    url = broker_urls()[name]
    if name != "rabbitmq":
        broker_purge(url)
        yield url
        broker_purge(url)
        return
    vhost = f"retrysafe-test-{uuid.uuid4().hex[:12]}"
    _rabbitmqctl("add_vhost", vhost)
    try:
        _rabbitmqctl("set_permissions", "-p", vhost, _rabbitmq_user(), ".*", ".*", ".*")
        yield urlunsplit(urlsplit(url)._replace(path=f"/{vhost}"))
    finally:
        _rabbitmqctl("delete_vhost", vhost)


def _rabbitmq_user() -> str:
    return urlsplit(RABBITMQ_URL).username or "guest"


def _rabbitmqctl(*args: str) -> None:
    result = subprocess.run(
        [RABBITMQCTL, "-q", *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, (
        f"rabbitmqctl {' '.join(args)}: {result.stdout}{result.stderr}"
    )


def broker_purge(url: str) -> None:
    """Empties the product's queue on the broker at ``url``; for Redis, also what killed
    workers left unacknowledged."""
    from config.celery_app import app

    # No queue yet on a fresh RabbitMQ: nothing to purge.
    with app.connection_for_write(url) as connection, contextlib.suppress(Exception):
        app.control.purge(connection=connection)
    if url.startswith("redis://"):
        client = redis.Redis.from_url(url)
        client.delete("unacked", "unacked_index", "unacked_mutex")
        client.close()
