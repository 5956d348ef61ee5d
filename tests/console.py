"""The admin console as its users reach it: staff users in the role groups, and admin actions
posted as the changelist's form posts them."""

from __future__ import annotations

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

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
