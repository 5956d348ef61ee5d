"""The trail's operator actions moved from the inbox's app to their own: the rows, the
permissions groups hold on them and the old admin addresses keep working."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from tests.core.test_migrations import latest, migrate
from trail.models import OperatorAction

BEFORE_THE_TRAIL = [
    ("webhooks", "0025_operator_action_switch_dependency"),
    ("trail", None),
]


@pytest.fixture
def before_the_trail():
    yield migrate(BEFORE_THE_TRAIL)
    migrate(latest())  # whatever the test did, the database ends where it started


@pytest.mark.django_db(transaction=True)
@pytest.mark.migrations
def test_the_rows_and_the_permissions_on_them_move_to_the_trail(before_the_trail):
    old = before_the_trail
    content_type = old.get_model("contenttypes", "ContentType")
    permission = old.get_model("auth", "Permission")
    actions, _ = content_type.objects.get_or_create(
        app_label="webhooks", model="operatoraction"
    )
    view, _ = permission.objects.get_or_create(
        content_type=actions,
        codename="view_operatoraction",
        defaults={"name": "Can view operator action"},
    )
    old.get_model("auth", "Group").objects.create(name="Readers").permissions.add(view)
    old.get_model("webhooks", "OperatorAction").objects.create(
        action="replay", actor_name="ops", event_ids=[7], event_count=1
    )

    migrate(latest())

    action = OperatorAction.objects.get()
    assert (action.actor_name, action.event_ids) == ("ops", [7])
    readers = Group.objects.get(name="Readers")
    assert [
        (p.pk, p.content_type.app_label, p.codename) for p in readers.permissions.all()
    ] == [(view.pk, "trail", "view_operatoraction")]


@pytest.mark.django_db
def test_the_old_admin_addresses_lead_to_the_trail(operator_client):
    response = operator_client.get("/admin/webhooks/operatoraction/12/change/?_popup=1")
    assert response.status_code == 301
    assert response["Location"] == "/admin/trail/operatoraction/12/change/?_popup=1"
    listing = operator_client.get("/admin/webhooks/operatoraction/", follow=True)
    assert listing.redirect_chain == [("/admin/trail/operatoraction/", 301)]
    assert listing.status_code == 200
