"""Finding things in the console: ids by their start, operator actions by the event they were
on, a range of days on the time columns."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from core.actors import Actor
from core.admin import pagination
from core.selectors import capped_count
from tests.integrations.research.factories import research_event
from tests.plans import partitions_planned
from tests.webhooks.factories import DeadLetteredEventFactory, InboxEventFactory
from webhooks import selectors
from webhooks.admin.inbox import InboxEventAdmin
from webhooks.models import InboxEvent
from webhooks.partitions import (
    DAY,
    inbox_partitions_ensure,
    partition_name,
    partitions,
)
from webhooks.partitions import INBOX as INBOX_TABLE
from webhooks.replay import inbox_events_replay
from webhooks.selectors import inbox_event_search_q
from webhooks.statements import day_start

pytestmark = pytest.mark.django_db

INBOX = "admin:webhooks_inboxevent_changelist"


def listed(client, name, **params):
    response = client.get(reverse(name), params)
    assert response.status_code == 200, params
    return {obj.pk for obj in response.context["cl"].result_list}


def test_an_event_or_entity_id_is_found_by_its_start(auditor_client):
    doc42 = InboxEventFactory(
        body=research_event(event_id="evt_doc42_7", entity_id="doc_42")
    )
    doc420 = InboxEventFactory(
        body=research_event(event_id="evt_doc420_1", entity_id="doc_420")
    )
    other = InboxEventFactory(body=research_event(event_id="evt_x_doc42"))
    assert listed(auditor_client, INBOX, q="evt_doc42") == {doc42.pk, doc420.pk}
    assert listed(auditor_client, INBOX, q="evt_doc42_") == {doc42.pk}
    assert listed(auditor_client, INBOX, q="doc_42") == {doc42.pk, doc420.pk}
    assert listed(auditor_client, INBOX, q=" evt_x ") == {other.pk}
    assert listed(auditor_client, INBOX, q="doc42") == set()  # a start, not a substring
    # LIKE's wildcards in the term are plain characters.
    assert listed(auditor_client, INBOX, q="evt_%") == set()


def test_a_search_finds_its_rows_on_every_day_with_or_without_their_bounds(
    auditor_client, monkeypatch
):
    """A search is bounded by the received times of the rows it finds (read first), or not
    at all when it finds more than ``SEARCH_BOUNDS_ROWS``: the same rows either way, those
    of the first and the last day included; a filter still applies within them."""
    now = timezone.now()
    rows = [
        InboxEventFactory(
            body=research_event(event_id=f"evt_span_{n}"),
            received_at=now - timedelta(days=days),
        )
        for n, days in enumerate((20, 7, 0))
    ]
    InboxEventFactory(body=research_event(event_id="evt_other"), received_at=now)
    found = {row.pk for row in rows}
    assert listed(auditor_client, INBOX, q="evt_span") == found
    assert (
        listed(auditor_client, INBOX, q="evt_span", processing_status__exact="received")
        == found
    )
    assert (
        listed(
            auditor_client, INBOX, q="evt_span", processing_status__exact="processed"
        )
        == set()
    )
    monkeypatch.setattr(selectors, "SEARCH_BOUNDS_ROWS", 2)
    assert listed(auditor_client, INBOX, q="evt_span") == found
    assert listed(auditor_client, INBOX, q="evt_nothing") == set()


def _days_read(statement: str, params) -> set[str]:
    """The inbox's partitions that ``statement``'s plan reads."""
    return partitions_planned(statement, params, INBOX_TABLE.table)


def _days(now, *days: int) -> set[str]:
    """The inbox's partitions of the days ``days`` after ``now``'s."""
    return {partition_name(INBOX_TABLE, day_start(now + n * DAY)) for n in days}


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite keeps the inbox in one table"
)
def test_a_search_finding_many_rows_reads_only_the_days_that_hold_them(monkeypatch):
    """A search that finds more rows than it reads the received times of is bounded by the
    days (time partitions) holding one of them: a page reads those days' partitions and no
    other, so that a prefix whose rows all lie in older days never has PostgreSQL walk the
    newer ones row by row (5.6 s a page on three million rows, docs/scaling.md)."""
    inbox_partitions_ensure(ahead_days=4)
    now = timezone.now()
    found = [
        InboxEventFactory(
            body=research_event(event_id=f"evt_wide_{n}"),
            received_at=now + days * DAY,
        )
        for n, days in enumerate((1, 3, 3))
    ]
    for days in (0, 2, 4):
        InboxEventFactory(received_at=now + days * DAY)
    monkeypatch.setattr(selectors, "SEARCH_BOUNDS_ROWS", 2)
    searched = selectors.inbox_events_search(
        InboxEvent.objects.order_by("-received_at"), term="evt_wide"
    )
    assert set(searched.values_list("pk", flat=True)) == {row.pk for row in found}
    assert _days_read(*searched.query.sql_with_params()) == _days(now, 1, 3)
    assert (
        selectors.inbox_events_search(
            InboxEvent.objects.all(), term="evt_nothing"
        ).count()
        == 0
    )


def _hierarchy(page: str) -> list[str]:
    """The links of the page's date hierarchy, in order."""
    return re.findall(r'href="([^"]*received_at__year=[^"]*)"', page)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite keeps the inbox in one table"
)
def test_a_search_finding_many_rows_offers_the_dates_of_its_days_without_reading_them(
    auditor_client, monkeypatch
):
    """A search that finds more rows than it reads the received times of knows the days
    that hold them: the date hierarchy offers those days' dates, the same as from the first
    and last row found, without reading those rows (at ten million rows that read walked
    the received-time index through every row of those days that did not match: 342 ms of
    a 590 ms page, docs/scaling.md)."""
    inbox_partitions_ensure(ahead_days=4)
    now = timezone.now()
    for n, days in enumerate((1, 3, 3)):
        InboxEventFactory(
            body=research_event(event_id=f"evt_period_{n}"),
            received_at=now + days * DAY,
        )
    for days in (0, 2, 4):
        InboxEventFactory(received_at=now + days * DAY)
    # Rows on more than one page: a page that shows every row offers the dates of its rows.
    monkeypatch.setattr(InboxEventAdmin, "list_per_page", 2)

    def page() -> tuple[list[str], list[str]]:
        with CaptureQueriesContext(connection) as captured:
            response = auditor_client.get(reverse(INBOX), {"q": "evt_period"})
        assert response.status_code == 200
        assert len(response.context["cl"].result_list) == 2
        # The hierarchy's reads of the list's ends (its first row; its last is the page's).
        ends = f'SELECT "{INBOX_TABLE.table}"."received_at" AS "received_at" FROM'
        reads = [
            q["sql"] for q in captured.captured_queries if q["sql"].startswith(ends)
        ]
        return _hierarchy(response.content.decode()), reads

    offered, reads = page()
    assert offered and len(reads) == 1  # the first row found, read
    monkeypatch.setattr(selectors, "SEARCH_BOUNDS_ROWS", 2)
    assert page() == (offered, [])


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite keeps the inbox in one table"
)
def test_the_days_of_a_search_are_probed_through_the_id_indexes_alone(monkeypatch):
    """Each day's probe for a row the search finds is an index-only scan of one id index,
    which stops at the first entry of the prefix's range: a probe of both ids together
    cannot be one, and was planned as a scan of the day's rows in their order on disk, up
    to the first match (167 ms at ten million rows, docs/bench-log/2026-12-07.md)."""
    inbox_partitions_ensure(ahead_days=2)
    now = timezone.now()
    times = [now + n * DAY for n in range(3)]
    for n, received_at in enumerate(times):
        InboxEventFactory(
            body=research_event(event_id=f"evt_probe_{n}"), received_at=received_at
        )
    # The partitions holding them (the probes of the others read empty days, whichever
    # indexes earlier tests' migrations left there).
    holding = {
        day.name
        for day in partitions(INBOX_TABLE)
        if any((day.start is None or day.start <= t) and t < day.end for t in times)
    }
    monkeypatch.setattr(selectors, "SEARCH_BOUNDS_ROWS", 2)
    with CaptureQueriesContext(connection) as statements:
        list(selectors.inbox_events_search(InboxEvent.objects.all(), term="evt_probe"))
    [probe] = [q["sql"] for q in statements.captured_queries if 'AS "day"' in q["sql"]]
    with connection.cursor() as cursor:
        # Empty days are read cheapest through any index: every other way is ruled out,
        # so that the plan shows what the statement allows.
        for way in ("seqscan", "bitmapscan", "indexscan"):
            cursor.execute(f"SET LOCAL enable_{way} = off")
        cursor.execute(f"EXPLAIN {probe}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    scans = [
        line
        for line in plan.splitlines()
        if "Scan" in line and any(f" on {name} " in line for name in holding)
    ]
    assert len(scans) == 2 * len(holding), plan  # one a partition and an id
    assert all("Index Only Scan" in line for line in scans), plan


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite keeps the inbox in one table"
)
def test_a_search_known_to_find_more_than_the_cap_is_not_counted(
    auditor_client, monkeypatch
):
    """A search whose index held more rows than the page's count is capped at shows the
    capped count without counting (a count read its days in their order on disk until it
    had enough, docs/scaling.md); with a filter before it, whose rows it cannot know, it
    counts them. The same count shown either way."""
    inbox_partitions_ensure(ahead_days=2)
    now = timezone.now()
    for n in range(4):
        InboxEventFactory(
            body=research_event(event_id=f"evt_many_{n}"), received_at=now + n % 2 * DAY
        )
    monkeypatch.setattr(selectors, "SEARCH_BOUNDS_ROWS", 2)
    monkeypatch.setattr(pagination, "COUNT_CAP", 2)
    # A statement's start looked for among those run, never run itself.
    count = f'SELECT COUNT(*) FROM (SELECT "{INBOX_TABLE.table}"."id"'  # noqa: S608

    def page(**params) -> tuple[int, bool]:
        with CaptureQueriesContext(connection) as captured:
            response = auditor_client.get(reverse(INBOX), {"q": "evt_many", **params})
        assert response.status_code == 200
        assert len(response.context["cl"].result_list) == 4
        assert 'id="count-capped"' in response.content.decode()  # "more than 2"
        counted = any(count in q["sql"] for q in captured.captured_queries)
        return response.context["cl"].result_count, counted

    assert page() == (3, False)  # more than 2
    assert page(processing_status__exact="received") == (3, True)
    # What the search knows is of its own rows: any queryset made from them counts (a
    # replay's check of the selected rows that failed for their data, say: none here).
    searched = selectors.inbox_events_search(InboxEvent.objects.all(), term="evt_many")
    assert capped_count(searched, cap=2) == 3
    assert capped_count(searched.filter(processing_status="dead_lettered"), cap=2) == 0
    assert capped_count(searched.order_by("pk"), cap=2) == 3  # counted: 4 rows


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite's indexes hold no other column"
)
def test_a_search_reads_the_received_times_of_its_rows_from_the_id_indexes_alone():
    """The first statements of a search read the received times of the rows it finds (to
    bound the page's statements by them) from the two id indexes, which hold them
    (``webhooks.0038``): an index-only scan, no row visited, so that reading the times of
    100,000 rows costs about what 10,000 rows read one by one did (docs/scaling.md)."""
    now = timezone.now()
    for n, days in enumerate((0, 1, 1)):
        InboxEventFactory(
            body=research_event(event_id=f"evt_cover_{n}", entity_id=f"doc_cover_{n}"),
            received_at=now - days * DAY,
        )
    with CaptureQueriesContext(connection) as statements:
        list(selectors.inbox_events_search(InboxEvent.objects.all(), term="evt_cover"))
    bounds = [q["sql"] for q in statements.captured_queries if "MIN(" in q["sql"]]
    assert len(bounds) == 2  # one a column: event id, entity id
    with connection.cursor() as cursor:
        # Rows the planner would rather read some other way at this size: not an option.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        for statement in bounds:
            cursor.execute(f"EXPLAIN {statement}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            scans = [line for line in plan.splitlines() if "Scan" in line]
            assert scans, plan
            assert all("Index Only Scan" in line for line in scans), plan


def test_the_prefix_search_is_an_index_scan():
    InboxEventFactory.create_batch(3)
    sql, params = InboxEvent.objects.filter(
        inbox_event_search_q(term="evt_doc")
    ).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # A range of the pattern operator class's order: a condition of the id indexes.
    assert (
        "(event_id)::text ~>=~ 'evt_doc'" in plan
        and "(entity_id)::text ~>=~ 'evt_doc'" in plan
    ), plan


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite keeps the inbox in one table"
)
def test_the_operator_actions_search_reads_the_newest_rows_of_the_days_holding_them():
    """The actions' search by an event id prefix reads its newest rows only in the days
    that hold one (11.4 s on three million rows when it walked every newer day)."""
    inbox_partitions_ensure(ahead_days=4)
    now = timezone.now()
    for days in (1, 3):
        InboxEventFactory(
            body=research_event(event_id=f"evt_named_{days}"),
            received_at=now + days * DAY,
        )
    for days in (0, 2, 4):
        InboxEventFactory(received_at=now + days * DAY)
    with CaptureQueriesContext(connection) as captured:
        assert selectors.operator_actions_on_events_q(term="evt_named") is not None
    [newest] = [
        query["sql"]
        for query in captured.captured_queries
        if query["sql"].startswith(f'SELECT "{INBOX_TABLE.table}"."id"')
    ]
    assert _days_read(newest, None) == _days(now, 1, 3)


def test_operator_actions_are_found_by_the_event_they_were_on(auditor_client, operator):
    dead = DeadLetteredEventFactory(body=research_event(event_id="evt_doc42_7"))
    other = DeadLetteredEventFactory()
    on_dead = inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk=dead.pk),
        actor=Actor.of(operator),
        reason="fixed the handler",
    )
    inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk=other.pk),
        actor=Actor.of(operator),
        reason="fixed the handler",
    )
    actions = "admin:trail_operatoraction_changelist"
    assert listed(auditor_client, actions, q="evt_doc42") == {on_dead.pk}
    assert (
        len(listed(auditor_client, actions, q="operator")) == 2
    )  # by actor, as before
    assert listed(auditor_client, actions, q="evt_nothing") == set()


def test_a_range_of_days_filters_a_time_column(auditor_client):
    now = timezone.localtime()
    day = now.replace(hour=12, minute=0, second=0, microsecond=0)
    old = InboxEventFactory(received_at=day - timedelta(days=10))
    edge = InboxEventFactory(received_at=day.replace(hour=0) - timedelta(days=3))
    late = InboxEventFactory(
        received_at=day.replace(hour=23, minute=59) - timedelta(days=1)
    )
    new = InboxEventFactory(received_at=now)

    def days(**offsets):
        return {
            f"received_at__{k}": (day - timedelta(days=v)).date().isoformat()
            for k, v in offsets.items()
        }

    assert listed(auditor_client, INBOX, **days(**{"from": 3, "to": 1})) == {
        edge.pk,
        late.pk,
    }
    assert listed(auditor_client, INBOX, **days(**{"from": 3})) == {
        edge.pk,
        late.pk,
        new.pk,
    }
    assert listed(auditor_client, INBOX, **days(to=4)) == {old.pk}
    # Kept with the other filters, and a bad day is ignored.
    assert listed(
        auditor_client,
        INBOX,
        **days(**{"from": 30}),
        processing_status__exact="received",
    ) == {old.pk, edge.pk, late.pk, new.pk}
    assert len(listed(auditor_client, INBOX, received_at__from="yesterday")) == 4
    page = auditor_client.get(reverse(INBOX), days(**{"from": 3})).content.decode()
    assert (
        'type="date" name="received_at__from" value="'
        + (day - timedelta(days=3)).date().isoformat()
        in page
    )


@pytest.mark.parametrize(
    "changelist",
    [
        "admin:webhooks_deadletteredevent_changelist",
        "admin:trail_operatoraction_changelist",
        "admin:webhooks_bulkreplayjob_changelist",
        "admin:webhooks_signaturefailure_changelist",
        "admin:deployments_deployment_changelist",
        "admin:deployments_build_changelist",
        "admin:idempotency_idempotencyrecord_changelist",
    ],
)
def test_every_time_list_has_the_range(auditor_client, changelist):
    page = auditor_client.get(reverse(changelist)).content.decode()
    assert 'class="date-range"' in page and "__from" in page
