import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

from audit.roles import AUDITORS, OPERATORS, roles_bootstrap
from tests.broker import broker_messages  # noqa: F401 - used by the audit tests

PASSWORD = "correct-horse-battery"


def make_user(username: str, group: str | None):
    user = get_user_model().objects.create_user(
        username, f"{username}@example.com", PASSWORD, is_staff=True
    )
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


def admin_action(http, changelist: str, action: str, *objects, follow=False, **fields):
    """The admin action ``action`` on ``objects``, posted from the ``changelist``
    (``webhooks_deadletteredevent``) as its form posts it; ``post="yes"`` and the confirmation
    page's fields (a ``reason``) answer that page."""
    data = {
        "action": action,
        ACTION_CHECKBOX_NAME: [obj.pk for obj in objects],
        **fields,
    }
    return http.post(reverse(f"admin:{changelist}_changelist"), data, follow=follow)


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


@pytest.fixture
def empty_broker():
    from tests import processes

    processes.purge_broker()
    yield
    processes.purge_broker()
