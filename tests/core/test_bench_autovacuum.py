"""The end-to-end bench's stand-in for autovacuum on a server that runs without it
(``bench.endtoend._autovacuum_due``): what autovacuum would run, by its own thresholds, the
server's settings unless a table sets its own, on each partition apart and never on a
partitioned table itself."""

import psycopg
import pytest
from django.db import connection

from bench.endtoend import _autovacuum_due
from research.models import ResearchDocument
from tests import processes
from tests.processes import wait_until
from tests.webhooks.factories import InboxEventFactory

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENTS = "research_researchdocument"


def _run(statement: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement)


def _stats_flushed() -> None:
    # This session's counts reach the shared statistics when it next goes idle.
    _run("SELECT pg_stat_force_next_flush()")


@pytest.fixture
def due():
    # Counts of earlier work (another test's, the flush after it) reach the statistics
    # first, then the vacuum starts every table from nothing due.
    _stats_flushed()
    _run(f"VACUUM (ANALYZE) {DOCUMENTS}, webhooks_inboxevent, webhooks_inboxkey")
    with psycopg.connect(processes.test_database_url(), autocommit=True) as other:
        yield lambda: dict(_autovacuum_due(other))


def test_a_table_is_analyzed_past_its_analyze_threshold_and_vacuumed_past_its_vacuum_one(
    due,
):
    # 200 rows changed against autovacuum_analyze_threshold 50 (+ 10% of none): an analyze;
    # 200 inserted against autovacuum_vacuum_insert_threshold 1000: no vacuum.
    ResearchDocument.objects.bulk_create(
        ResearchDocument(entity_id=f"doc-{n}") for n in range(200)
    )
    _stats_flushed()
    found = wait_until(
        lambda: due().get(f"ANALYZE {DOCUMENTS}"), what="the analyze due"
    )
    # Throttled as autovacuum would be: the server's autovacuum_vacuum_cost_delay (ms).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setting::float FROM pg_settings "
            "WHERE name = 'autovacuum_vacuum_cost_delay'"
        )
        assert found == cursor.fetchone()[0]

    # Analyzed: 200 rows known. 100 dead against 50 + 20% of 200 (90): a vacuum, and the
    # 100 changed against 50 + 10% of 200 (70): an analyze with it.
    _run(f"ANALYZE {DOCUMENTS}")
    first = ResearchDocument.objects.order_by("pk").values_list("pk", flat=True)[:100]
    assert ResearchDocument.objects.filter(pk__in=list(first)).delete()[0] == 100
    _stats_flushed()
    wait_until(lambda: f"VACUUM (ANALYZE) {DOCUMENTS}" in due(), what="the vacuum due")


def test_a_table_turned_off_for_autovacuum_is_left_alone(due):
    _run(f"ALTER TABLE {DOCUMENTS} SET (autovacuum_enabled = false)")
    try:
        ResearchDocument.objects.bulk_create(
            ResearchDocument(entity_id=f"doc-{n}") for n in range(200)
        )
        _stats_flushed()
        # The ledger's keys of the same moment show the statistics arrived.
        InboxEventFactory.create_batch(60)
        _stats_flushed()
        wait_until(lambda: "ANALYZE webhooks_inboxkey" in due(), what="the ledger due")
        assert not [s for s in due() if DOCUMENTS in s]
    finally:
        _run(f"ALTER TABLE {DOCUMENTS} RESET (autovacuum_enabled)")


def test_the_inbox_is_looked_at_partition_by_partition_by_its_own_thresholds(due):
    # 60 rows: past the ledger's threshold (the server's, 50), not the inbox partitions'
    # own (5000 + 1% of their rows, webhooks.0020).
    InboxEventFactory.create_batch(60)
    _stats_flushed()
    wait_until(lambda: "ANALYZE webhooks_inboxkey" in due(), what="the ledger due")
    statements = due()
    assert not [s for s in statements if "webhooks_inboxevent" in s]
    # A partition's own lower threshold counts, and it is the partition that is named,
    # never the partitioned table.
    [partition] = _partitions_with_rows()
    _run(f"ALTER TABLE {partition} SET (autovacuum_analyze_threshold = 10)")
    try:
        statements = due()
        assert f"ANALYZE {partition}" in statements
        assert "ANALYZE webhooks_inboxevent" not in statements
    finally:
        _run(f"ALTER TABLE {partition} SET (autovacuum_analyze_threshold = 5000)")


def _partitions_with_rows() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT tableoid::regclass::text FROM webhooks_inboxevent"
        )
        return [row[0] for row in cursor.fetchall()]
