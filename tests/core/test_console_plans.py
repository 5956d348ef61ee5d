"""The console's statements are planned for their values (core/plans.py): a request to the
admin runs every statement unprepared, however often its page is shown on one connection,
while the rest of the product keeps preparing what it runs often."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.webhooks.factories import InboxEventFactory
from webhooks.models import InboxEvent
from webhooks.selectors import inbox_event_search_q

pytestmark = pytest.mark.django_db

SEARCH = "/admin/webhooks/inboxevent/?q=evt_plan"


def _prepared_inbox_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [
            statement
            for (statement,) in cursor.fetchall()
            if "webhooks_inboxevent" in statement
        ]


def test_the_console_s_search_is_never_prepared_however_often_it_is_shown(
    operator_client,
):
    """Prepared, a search would be planned without its term from its sixth run on: at ten
    million rows its date bounds took 9-34 s that way, against 10 ms planned for the term
    (docs/bench-log/2026-12-06.md, "The console at ten million rows")."""
    InboxEventFactory(event_id="evt_plan_1")
    for _ in range(8):
        response = operator_client.get(SEARCH)
        assert response.status_code == 200
        assert response.context["cl"].result_count == 1
    assert _prepared_inbox_statements() == []

    # The same lookups outside the admin are prepared at their fifth run, as everything
    # else the product runs often: what the console is kept out of.
    for _ in range(8):
        list(InboxEvent.objects.filter(inbox_event_search_q(term="evt_plan")))
    assert len(_prepared_inbox_statements()) == 1
