"""The API client a GitHub source is bound to (docs/security.md, "GitHub statuses and API
clients"): an admin field, and a change of it an operator action."""

import pytest
from django.urls import reverse

from core.actors import Actor
from tests.integrations.github.factories import github_source_create
from trail.api_clients import api_client_create
from trail.models import OperatorAction

pytestmark = pytest.mark.django_db


def test_an_operator_binds_a_source_to_a_client_and_the_trail_says_so(
    operator_client,
):
    client, _ = api_client_create(actor=Actor.system(), name="shop-ci")
    source = github_source_create("github-shop")
    url = reverse("admin:webhooks_webhooksource_change", args=[source.pk])

    response = operator_client.post(url, {"client": str(client.pk)})
    assert response.status_code == 302, response.content.decode()[:2000]
    source.refresh_from_db()
    assert source.client == client
    action = OperatorAction.objects.get(action="set_source_client")
    assert action.actor_name == "operator"
    assert action.details == {
        "source": "github-shop",
        "source_id": source.pk,
        "client_before": None,
        "client_after": "shop-ci",
    }

    # Saving it again unchanged records nothing; unbinding does.
    operator_client.post(url, {"client": str(client.pk)})
    assert OperatorAction.objects.filter(action="set_source_client").count() == 1
    operator_client.post(url, {"client": ""})
    source.refresh_from_db()
    assert source.client is None
    last = OperatorAction.objects.filter(action="set_source_client").latest("id")
    assert (last.details["client_before"], last.details["client_after"]) == (
        "shop-ci",
        None,
    )


def test_auditors_see_the_binding_and_cannot_change_it(auditor_client):
    client, _ = api_client_create(actor=Actor.system(), name="shop-ci")
    source = github_source_create("github-shop")
    url = reverse("admin:webhooks_webhooksource_change", args=[source.pk])
    assert auditor_client.post(url, {"client": str(client.pk)}).status_code == 403
    source.refresh_from_db()
    assert source.client is None
