import base64
import json

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from audit.roles import AUDITORS, OPERATORS, roles_bootstrap

PASSWORD = "correct-horse-battery"


def make_user(username: str, group: str | None):
    user = get_user_model().objects.create_user(
        username, f"{username}@example.com", PASSWORD, is_staff=True
    )
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def roles(db):
    roles_bootstrap()


@pytest.fixture
def operator(roles):
    return make_user("operator", OPERATORS)


@pytest.fixture
def auditor(roles):
    return make_user("auditor", AUDITORS)


@pytest.fixture
def operator_client(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def auditor_client(client, auditor):
    client.force_login(auditor)
    return client


def broker_messages(queue: str = "celery") -> list[dict]:
    """The messages waiting in the Redis list of the test broker: task name and args."""
    conn = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    found = []
    for raw in conn.lrange(queue, 0, -1):
        message = json.loads(raw)
        body = json.loads(base64.b64decode(message["body"]))
        found.append({"task": message["headers"]["task"], "args": body[0]})
    return found


@pytest.fixture
def empty_broker():
    from tests import processes

    processes.purge_broker()
    yield
    processes.purge_broker()
