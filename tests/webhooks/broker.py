"""Reading and clearing the test broker (Redis) directly, to count what was published."""

from __future__ import annotations

import base64
import json

import redis
from django.conf import settings

from tests import processes

QUEUE = "celery"


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def broker_reset() -> None:
    """Empties the queue and forgets unacked messages of killed workers from earlier runs."""
    processes.purge_broker()
    client = redis_client()
    client.delete("unacked", "unacked_index", "unacked_mutex")


def queued_inbox_event_ids() -> list[int]:
    """The inbox row ids of the processing messages waiting in the queue, one per message."""
    ids = []
    for raw in redis_client().lrange(QUEUE, 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] != "webhooks.process_inbox_event":
            continue
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        ids.append(args[0])
    return ids
