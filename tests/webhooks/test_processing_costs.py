"""What processing costs the database per event (docs/bench-log/2026-12-01.md, "Statements and row
versions per event"): statements, and the row versions it writes to each table (PostgreSQL's
own counters, ``pg_stat_user_tables``), for the same events applied as sets and one event at a
time. ``-s`` prints the table."""

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from research.models import Citation, DocumentRevision, ResearchDocument
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import inbox_events_bulk_create
from webhooks import processing
from webhooks.models import InboxAttempt, InboxEvent

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENTS = 250  # each with a first and a second version: 500 events, batches of 50
BATCH = 50
TABLES = [
    InboxEvent._meta.db_table,
    InboxAttempt._meta.db_table,
    ResearchDocument._meta.db_table,
    Citation._meta.db_table,
    DocumentRevision._meta.db_table,
]


def table_counters() -> dict[str, tuple[int, int, int, int]]:
    """(inserted, updated, of which HOT, deleted) per table, as the server counts them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(0.05)  # the backend flushes its counters once idle
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del"
            " FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            [TABLES],
        )
        return {name: tuple(values) for name, *values in cursor.fetchall()}


def measure(prefix: str) -> dict:
    """500 events (250 documents' first then second versions, one citation each) processed
    in batches of 50: statements, and row versions per event and per table."""
    bodies = [
        research_event(entity_id=f"{prefix}_{n}", source_version=version)
        for version in (1, 2)
        for n in range(DOCUMENTS)
    ]
    rows = inbox_events_bulk_create(bodies)
    ids = [row.pk for row in rows]
    before = table_counters()
    with CaptureQueriesContext(connection) as queries:
        for start in range(0, len(ids), BATCH):
            outcomes = processing.inbox_events_process(
                ids=ids[start : start + BATCH], worker="w"
            )
            assert {o.status for o in outcomes} == {"processed"}
    after = table_counters()
    events = len(ids)
    per_table = {}
    for table in TABLES:
        ins, upd, hot, dele = (
            a - b for a, b in zip(after[table], before[table], strict=True)
        )
        per_table[table] = {
            "written": (ins + upd) / events,
            "updated": upd / events,
            "hot": hot / events,
            "dead": (upd + dele) / events,
        }
    return {
        "statements": len(queries.captured_queries) / events,
        "written": sum(t["written"] for t in per_table.values()),
        "dead": sum(t["dead"] for t in per_table.values()),
        "tables": per_table,
    }


@pytest.mark.slow
def test_a_set_costs_fewer_statements_and_row_versions_per_event(monkeypatch):
    as_sets = measure("costs_set")
    monkeypatch.setattr(processing, "integration_batch_get", lambda name: None)
    per_event = measure("costs_single")

    print()
    print(f"{'':28} {'per event':>22} {'as sets':>22}")
    for key in ("statements", "written", "dead"):
        print(f"{key:28} {per_event[key]:22.2f} {as_sets[key]:22.2f}")
    for table in TABLES:
        for key in ("written", "updated", "hot", "dead"):
            print(
                f"{table[:20] + ' ' + key:28} {per_event['tables'][table][key]:22.2f}"
                f" {as_sets['tables'][table][key]:22.2f}"
            )
    # Per event: BEGIN, the document's lock, its writes, the close, COMMIT; as sets, once
    # per batch, with the batch's days (read from the ledger, for the claim and the close to
    # name their time partitions) and the claim: 7 (the claim and the lock set their own
    # lock_timeout).
    assert per_event["statements"] >= 5
    assert as_sets["statements"] <= 7 / BATCH
    # One revision, one attempt, the claim and the close of the row, whichever the path.
    inbox = InboxEvent._meta.db_table
    assert as_sets["tables"][inbox]["updated"] == per_event["tables"][inbox]["updated"]
    # A document is written once per batch (inserted with its state, or updated after a
    # lock that writes nothing); per event, a new document is created, then written.
    documents = ResearchDocument._meta.db_table
    assert 1 < per_event["tables"][documents]["written"] <= 2
    assert as_sets["tables"][documents]["written"] == 1
    assert as_sets["written"] < per_event["written"]
