"""The console's statements are planned for their values (core/plans.py): a request to the
admin runs every statement with values unprepared, however often its page is shown on one
connection; one without values is prepared at its first run, and the rest of the product
keeps preparing what it runs often."""

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
    operator_client, monkeypatch
):
    """The type filter's choices, the date hierarchy's first row and the whole list's rows
    (no value: the same plan whatever the page) are prepared at their first run and never
    planned again on that connection: at ten million rows over 38 partitions, the first two
    planned cost 8.7 and 6.3 ms a page, prepared 2.0 and 0.3 (docs/scaling.md, "The
    console's first pages at ten million rows"). Prepared at their fifth run, a page shown
    a few times a minute on each of the web's connections planned them nearly every time."""
    from webhooks.admin.inbox import InboxEventAdmin

    # Two rows, a page of one: the hierarchy reads the list's first row (its last is the
    # page's first).
    monkeypatch.setattr(InboxEventAdmin, "list_per_page", 1)
    InboxEventFactory(event_id="evt_plan_1")
    InboxEventFactory(event_id="evt_plan_2")
    assert operator_client.get("/admin/webhooks/inboxevent/").status_code == 200
    prepared = _prepared_inbox_statements(with_values=False)
    assert any("WITH RECURSIVE types" in statement for statement in prepared), prepared
    first = 'SELECT "webhooks_inboxevent"."received_at" AS "received_at"'
    assert any(s.startswith(first) and s.endswith("ASC LIMIT 1") for s in prepared)
    # The page's rows: their log entries and attempts are read after them
    # (``InboxEventAdmin.page_rows``), so the statement of the whole list names no value.
    rows = 'SELECT "webhooks_inboxevent"."id", '
    assert any(s.startswith(rows) for s in prepared), prepared
    for _ in range(3):
        assert operator_client.get("/admin/webhooks/inboxevent/").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ["%WITH RECURSIVE types%"],
        )
        generic, custom = cursor.fetchone()
    assert (generic, custom) == (4, 0)


def test_a_word_the_code_knows_is_written_into_the_list_s_statements(operator_client):
    """The dead-letter queue's status, a status chosen in the inbox's filter among the
    column's choices and a type among the type filter's are written into the statements
    (``core.models.Constant``), not sent as values: the list's count, rows and first row
    then hold no value and are prepared at their first run, planned once per connection
    for that word. A value that is not a choice is sent as a value, as Django sends it, and
    finds nothing."""
    InboxEventFactory(event_id="evt_plan_1", processing_status="dead_lettered")
    InboxEventFactory(event_id="evt_plan_2", processing_status="processed")
    inbox = "/admin/webhooks/inboxevent/"
    pages = {
        ("/admin/webhooks/deadletteredevent/", ""): ["evt_plan_1"],
        (inbox, "processing_status__exact=processed"): ["evt_plan_2"],
        (inbox, "event_type=research.document.updated"): ["evt_plan_2", "evt_plan_1"],
    }
    for (url, query), shown in pages.items():
        response = operator_client.get(f"{url}?{query}")
        assert response.status_code == 200
        assert [e.event_id for e in response.context["cl"].result_list] == shown
    prepared = _prepared_inbox_statements(with_values=False)
    for column, word in (
        ("processing_status", "dead_lettered"),
        ("processing_status", "processed"),
        ("event_type", "research.document.updated"),
    ):
        assert any(
            s.startswith('SELECT "webhooks_inboxevent"."id", ')
            and f"\"{column}\" = '{word}'" in s
            for s in prepared
        ), (word, prepared)
    assert _prepared_inbox_statements() == []

    for param in ("processing_status__exact", "event_type"):
        response = operator_client.get(inbox, {param: "x' OR 'a'='a"})
        assert response.status_code == 200
        assert list(response.context["cl"].result_list) == []
    assert not any(
        "OR 'a'='a" in s for s in _prepared_inbox_statements(with_values=False)
    )


def test_a_constant_is_a_word_of_the_code_or_refused():
    from core.models import Constant

    assert Constant("dead_lettered").as_sql(None, None) == ("'dead_lettered'", [])
    for value in ("x' OR 'a'='a", "Dead", "", "a" * 65, "a b", "a;b"):
        with pytest.raises(ValueError, match="not a constant"):
            Constant(value)
