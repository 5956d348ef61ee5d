"""The console's statements are planned for their values (core/plans.py): a request to the
admin runs every statement with values unprepared, however often its page is shown on one
connection, while a statement without values, and the rest of the product, keep preparing
what they run often."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.webhooks.factories import InboxEventFactory
from webhooks.models import InboxEvent
from webhooks.selectors import inbox_event_search_q

pytestmark = pytest.mark.django_db

SEARCH = "/admin/webhooks/inboxevent/?q=evt_plan"


def _prepared_inbox_statements(*, with_values: bool = True) -> list[str]:
    """The inbox statements this connection has prepared, those with values (or those
    without)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, cardinality(parameter_types) > 0"
            "  FROM pg_prepared_statements"
        )
        return [
            statement
            for statement, has_values in cursor.fetchall()
            if "webhooks_inboxevent" in statement and has_values == with_values
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


def test_a_console_statement_without_values_is_planned_once_per_connection(
    operator_client,
):
    """The type filter's choices (no value: the same plan whatever the page) are prepared
    at their fifth run and never planned again on that connection: planning them over
    every partition of the inbox cost 5 ms at 36 of them, running them 2 ms."""
    InboxEventFactory(event_id="evt_plan_1")
    for _ in range(8):
        assert operator_client.get("/admin/webhooks/inboxevent/").status_code == 200
    (statement,) = [
        statement
        for statement in _prepared_inbox_statements(with_values=False)
        if "WITH RECURSIVE types" in statement
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement = %s",
            [statement],
        )
        generic, custom = cursor.fetchone()
    assert generic >= 3
    assert custom == 0
