"""The inbox's list at millions of rows: a sort no index gives is made only for a list of at
most the count's cap of rows (docs/console.md, "Sorting a long list"), and a list that fits
one page reads its rows up to its count ("A list that fits one page")."""

import re

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from core.admin import pagination
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import InboxEventFactory
from webhooks.partitions import DAY

pytestmark = pytest.mark.django_db

INBOX = "admin:webhooks_inboxevent_changelist"


def _column(client, name: str) -> int:
    """The number of the list's column ``name`` in the ``o`` parameter."""
    response = client.get(reverse(INBOX))
    return list(response.context["cl"].list_display).index(name)


def _page(client, **params):
    with CaptureQueriesContext(connection) as captured:
        response = client.get(reverse(INBOX), params)
    assert response.status_code == 200
    cl = response.context["cl"]
    said = [str(m) for m in get_messages(response.wsgi_request)]
    statements = [q["sql"] for q in captured.captured_queries]
    return cl, said, statements


@pytest.fixture
def versions():
    """Four events of two entities, their versions in no order of their received times."""
    now = timezone.now()
    rows = []
    for n, (entity, version) in enumerate(
        (("doc_a", 7), ("doc_b", 3), ("doc_a", 9), ("doc_b", 1))
    ):
        rows.append(
            InboxEventFactory(
                body=research_event(
                    event_id=f"evt_sort_{n}",
                    entity_id=entity,
                    source_version=version,
                ),
                received_at=now - n * DAY / 24,
            )
        )
    return rows


def test_a_list_past_the_cap_keeps_its_order_and_says_why(
    auditor_client, versions, monkeypatch
):
    """Past the cap, a sort by version (no index orders it: every row of the list would be
    read and sorted) is not made: the list keeps its newest-first order, the header shows
    no sort, and the page says how to get one. Within the cap the same sort is made."""
    monkeypatch.setattr(pagination, "COUNT_CAP", 3)
    version = _column(auditor_client, "version")
    newest_first = [row.pk for row in versions]

    cl, said, statements = _page(auditor_client, o=str(version))
    assert [row.pk for row in cl.result_list] == newest_first
    assert version not in cl.get_ordering_field_columns()
    assert any("more than 3 rows" in text for text in said), said
    assert not any(
        '"source_version"' in sql.split("ORDER BY")[-1] for sql in statements
    )

    # A search leaves two rows: sorted by version, ascending and descending.
    cl, said, _ = _page(auditor_client, o=str(version), q="doc_a")
    assert [row.source_version for row in cl.result_list] == [7, 9]
    assert cl.get_ordering_field_columns() == {version: "asc"}
    assert said == []
    cl, _, _ = _page(auditor_client, o=f"-{version}", q="doc_b")
    assert [row.source_version for row in cl.result_list] == [3, 1]

    # Within a cap of four, the whole list is sorted.
    monkeypatch.setattr(pagination, "COUNT_CAP", 4)
    cl, said, _ = _page(auditor_client, o=str(version))
    assert [row.source_version for row in cl.result_list] == [1, 3, 7, 9]
    assert said == []


def test_the_orders_an_index_gives_sort_any_list_without_a_count_of_their_own(
    auditor_client, versions, monkeypatch
):
    """The received time, and the status, the source and the type each then the received
    time, are orders an index gives the whole list (either way): made past the cap, counted
    once (the page's own capped count), no message. The status then the received time in
    the other direction is not one: past the cap, not made. On a filtered list, only the
    list's own order is."""
    monkeypatch.setattr(pagination, "COUNT_CAP", 1)
    received = _column(auditor_client, "received_time")
    status = _column(auditor_client, "status")
    versions[1].processing_status = "dead_lettered"
    versions[1].save(update_fields=["processing_status"])
    newest_first = [row.pk for row in versions]
    made = (
        (str(received), newest_first[::-1]),
        (f"-{received}", newest_first),
        # Django's first click on a header: that column, then the list's own order.
        (
            f"{status}.-{received}",
            [newest_first[1], *newest_first[:1], *newest_first[2:]],
        ),
        (
            f"-{status}.{received}",
            [*newest_first[2:][::-1], newest_first[0], newest_first[1]],
        ),
    )
    for order, expected in made:
        cl, said, statements = _page(auditor_client, o=order)
        assert [row.pk for row in cl.result_list] == expected, order
        assert said == [], order
        counts = [sql for sql in statements if sql.startswith("SELECT COUNT(*)")]
        assert len(counts) == 1, counts

    cl, said, _ = _page(auditor_client, o=f"-{status}.-{received}")
    assert [row.pk for row in cl.result_list] == newest_first
    assert any("more than 1 rows" in text for text in said), said

    # A filter's rows may lie anywhere along the type's or the status's index (the dead
    # letters, all of one type, behind every row of the types before it): on a filtered
    # list past the cap only the list's own order, either way, is made.
    event_type = _column(auditor_client, "event_type")
    filtered = {"processing_status__exact": versions[0].processing_status}
    cl, said, _ = _page(auditor_client, o=f"{event_type}.-{received}", **filtered)
    assert any("more than 1 rows" in text for text in said), said
    assert event_type not in cl.get_ordering_field_columns()
    cl, said, _ = _page(auditor_client, o=str(received), **filtered)
    assert said == []
    assert [row.pk for row in cl.result_list] == [
        pk for pk in newest_first[::-1] if pk != versions[1].pk
    ]


def test_a_list_that_fits_one_page_reads_its_counted_rows_and_no_date_bounds(
    auditor_client, versions
):
    """Django reads a list that fits one page without a limit, and its date hierarchy reads
    the first and last row apart: a filter that matched none of ten million rows read every
    row of its index three times (count, rows, bounds), seconds. The rows are read up to the
    count, none when it is none, and the hierarchy's dates come from the rows shown."""
    table = '"webhooks_inboxevent"'

    cl, _, statements = _page(
        auditor_client, processing_status__exact="dead_lettered", event_type="none.such"
    )
    assert list(cl.result_list) == []
    # The statements that read the list's rows (the type filter's choices read its index).
    reads = [sql for sql in statements if "'none.such'" in sql]
    assert len(reads) == 1 and reads[0].startswith("SELECT COUNT(*)"), reads

    response = auditor_client.get(reverse(INBOX), {"q": "doc_a"})
    with CaptureQueriesContext(connection) as captured:
        again = auditor_client.get(reverse(INBOX), {"q": "doc_a"})
    statements = [q["sql"] for q in captured.captured_queries]
    rows = [sql for sql in statements if sql.startswith(f"SELECT {table}.")]
    assert rows and all(sql.rstrip().endswith("LIMIT 2") for sql in rows), rows
    assert not any(
        'MIN("webhooks_inboxevent"."received_at")' in sql for sql in statements
    )
    # The same dates offered as when the bounds were read.
    assert again.context["cl"].result_count == 2
    links = re.findall(r'href="(\?[^"]*received_at__[^"]*)"', again.content.decode())
    assert links and links == re.findall(
        r'href="(\?[^"]*received_at__[^"]*)"', response.content.decode()
    )


def test_the_list_offers_no_counts_beside_its_filters(auditor_client, versions):
    """Django's "Show counts" counts, for each filter, every row of the list without it,
    every choice in one pass: 8.0 s at a million rows (docs/scaling.md). The inbox's list
    offers no such link, and the parameter counts nothing."""
    response = auditor_client.get(reverse(INBOX))
    assert "_facets" not in response.content.decode()
    cl, _, statements = _page(auditor_client, _facets="True")
    assert not cl.add_facets
    # Facets would count the list's rows for each choice (the page's attempt counts, read
    # from the attempts for its rows alone, are no such count).
    counts = [sql for sql in _inbox_reads(statements) if " FILTER (WHERE " in sql]
    assert counts == []


@pytest.fixture
def days_later(monkeypatch):
    """Five events: two received now (the test database's first partition), three on the
    next two days; the inbox's selectors reading the time two days on, so that those two
    days are yesterday's partition and today's."""
    from types import SimpleNamespace

    from webhooks import selectors

    now = timezone.now()
    rows = [
        InboxEventFactory(received_at=now + offset)
        for offset in (
            2 * DAY - DAY / 24,
            2 * DAY - DAY / 12,
            DAY,
            -DAY / 24,
            -DAY / 12,
        )
    ]
    later = now + 2 * DAY
    monkeypatch.setattr(selectors, "timezone", SimpleNamespace(now=lambda: later))
    return rows


def _inbox_reads(statements: list[str]) -> list[str]:
    """The statements that read the inbox's rows (the type filter's choices aside)."""
    return [
        sql
        for sql in statements
        if 'FROM "webhooks_inboxevent"' in sql and not sql.lstrip().startswith("WITH")
    ]


def _dates_offered(client, **params) -> list[str]:
    return re.findall(
        r'href="(\?[^"]*received_at__[^"]*)"',
        client.get(reverse(INBOX), params).content.decode(),
    )


def test_the_whole_list_newest_first_reads_its_newest_days_alone(
    auditor_client, days_later, monkeypatch
):
    """The whole list newest first is read from yesterday's partition on when those days
    hold more rows than the page counts: every row a page offers lies there. Each statement
    of the page is bounded by that day but the whole inbox's first and last row, and the
    page shows the same rows and offers the same dates as read over every partition."""
    from webhooks.admin.inbox import InboxEventAdmin

    newest_first = [row.pk for row in days_later]
    monkeypatch.setattr(InboxEventAdmin, "list_per_page", 2)
    monkeypatch.setattr(pagination, "COUNT_CAP", 10)
    over_every_day = _dates_offered(auditor_client)
    cl, _, statements = _page(auditor_client, p="2")
    assert [row.pk for row in cl.result_list] == newest_first[2:4]
    # Three rows since yesterday's start, within a cap of ten: counted, then every day read.
    rows = [
        sql for sql in statements if sql.startswith('SELECT "webhooks_inboxevent".')
    ]
    assert rows and all('"received_at" >=' not in sql for sql in rows), rows

    # Three rows since yesterday's start, a cap of two: only those days are read.
    monkeypatch.setattr(pagination, "COUNT_CAP", 2)
    day = f"'{days_later[2].received_at.date()} 00:00:00"
    since = f'"received_at" >= {day}'
    for page, shown in (("1", newest_first[:2]), ("2", newest_first[2:3])):
        cl, _, statements = _page(auditor_client, p=page)
        assert cl.result_count == 3 and cl.multi_page
        assert [row.pk for row in cl.result_list] == shown
        reads = _inbox_reads(statements)
        bounded = [sql for sql in reads if since in sql]
        unbounded = [sql for sql in reads if sql not in bounded]
        # The whole inbox's first and last row, its one statement without a value.
        assert len(unbounded) == 1 and "MIN(" in unbounded[0], unbounded
        assert "WHERE" not in unbounded[0] and "MAX(" in unbounded[0]
        # The newest days' rows counted, and the page's rows; then the rows' attempts, from
        # the partitions of the days of the page's rows alone.
        assert [sql.split(" ", 2)[1] for sql in bounded] == [
            "COUNT(*)",
            '"webhooks_inboxevent"."id",',
        ], bounded
        [attempts] = [s for s in statements if 'FROM "webhooks_inboxattempt"' in s]
        oldest = min(row.received_at for row in cl.result_list)
        assert f'"event_received_at" >= \'{oldest.isoformat(sep=" ")}' in attempts
    assert _dates_offered(auditor_client) == over_every_day
    # An action on the list selected whole takes every row, not the page's days.
    response = auditor_client.get(reverse(INBOX))
    cl = response.context["cl"]
    assert cl.get_queryset(response.wsgi_request).count() == len(days_later)

    # Filtered, or in another order, the list is read as before.
    for params in (
        {"processing_status__exact": days_later[0].processing_status},
        {"o": str(_column(auditor_client, "received_time"))},
    ):
        _, _, statements = _page(auditor_client, **params)
        assert all(since not in sql for sql in _inbox_reads(statements)), params


def test_a_filtered_list_s_dates_are_read_as_its_first_row_and_its_page(
    auditor_client, monkeypatch
):
    """The date hierarchy of a filtered list spans its first and last row. ``MIN`` and
    ``MAX`` in one statement are planned three times, each over every partition (over a
    year of daily partitions, 250 ms of planning): the last row's time is the page's first
    row's when the page is the list's first, newest first, and each other end is read as
    the one row first in its order (docs/scaling.md, "At a year of daily partitions")."""
    from django.db.models import Max, Min

    from core.templatetags.admin_bounded import _range
    from webhooks.admin.inbox import InboxEventAdmin
    from webhooks.models import InboxEvent

    monkeypatch.setattr(InboxEventAdmin, "list_per_page", 2)
    now = timezone.now()
    for n in range(4):
        InboxEventFactory(processing_status="received", received_at=now - n * DAY)
    # Older than all of them, another status: outside the filtered list.
    InboxEventFactory(processing_status="processed", received_at=now - 9 * DAY)
    ends = InboxEvent.objects.filter(processing_status="received").aggregate(
        first=Min("received_at"), last=Max("received_at")
    )
    expected = (timezone.localtime(ends["first"]), timezone.localtime(ends["last"]))

    def ends_read(statements):
        return [
            sql.rsplit(" ", 3)[1]
            for sql in statements
            if sql.startswith('SELECT "webhooks_inboxevent"."received_at" AS')
        ]

    cl, _, statements = _page(auditor_client, processing_status__exact="received")
    assert cl.multi_page
    assert not any(
        'MIN("webhooks_inboxevent"."received_at")' in sql for sql in statements
    )
    assert ends_read(statements) == ["ASC"]
    assert _range(cl) == expected
    cl, _, statements = _page(auditor_client, processing_status__exact="received", p=2)
    assert sorted(ends_read(statements)) == ["ASC", "DESC"]
    assert _range(cl) == expected
    # Oldest first, the page's first row is the list's first, not its last: both read.
    received = _column(auditor_client, "received_time")
    cl, _, statements = _page(
        auditor_client, processing_status__exact="received", o=str(received)
    )
    assert sorted(ends_read(statements)) == ["ASC", "DESC"]
    assert _range(cl) == expected
    # A filter no row matches: one statement finds no last row.
    cl, _, statements = _page(auditor_client, processing_status__exact="failed")
    assert _range(cl) == (None, None)
