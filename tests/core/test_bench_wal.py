"""``bench.wal``: the write-ahead log of a stretch of work read back with ``pg_waldump`` and
told by table, heap and index, as ``python -m bench.inprocess`` prints it
(docs/benchmarks.md, "What a step writes to the log")."""

import pytest
from django.db import connection

from bench.wal import WalRange, breakdown, report

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,  # pg_waldump, a process
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="the write-ahead log is PostgreSQL's",
    ),
]


def _database_url() -> str:
    settings = connection.settings_dict
    user = settings["USER"] or "postgres"
    host = settings["HOST"] or "127.0.0.1"
    port = settings["PORT"] or 5432
    return f"postgres://{user}@{host}:{port}/{settings['NAME']}"


@pytest.fixture
def probe_table():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE wal_probe (id bigint PRIMARY KEY, note text)")
        cursor.execute("CREATE INDEX wal_probe_note ON wal_probe (note)")
        # The indexes' first entries (their root pages made) before the stretch.
        cursor.execute("INSERT INTO wal_probe VALUES (0, 'note 0')")
    yield "wal_probe"
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE wal_probe")


def test_a_stretch_of_the_log_is_told_by_table_heap_and_index(probe_table, capsys):
    span = WalRange(url=_database_url())
    span.start()
    with connection.cursor() as cursor:
        for n in range(1, 41):
            cursor.execute("INSERT INTO wal_probe VALUES (%s, %s)", [n, f"note {n}"])
        # The indexed column changes: no HOT update, a new entry in each index.
        cursor.execute(
            "UPDATE wal_probe SET note = note || '!' WHERE id BETWEEN 1 AND 10"
        )
    span.stop()

    relations = breakdown(span)

    assert relations is not None
    heap = relations[("wal_probe", "heap")]
    assert heap.kinds["Heap/INSERT"] + heap.kinds.get("Heap/INSERT+INIT", 0) == 40
    assert heap.kinds["Heap/UPDATE"] == 10
    for index in ("wal_probe_pkey", "wal_probe_note"):
        assert relations[("wal_probe", index)].kinds["Btree/INSERT_LEAF"] == 50
    assert relations[("(no relation)", "Transaction/COMMIT")].records >= 41
    assert span.written >= sum(r.written for r in relations.values()) > 0

    report("probe", relations, 10)
    printed = capsys.readouterr().out
    assert "probe: WAL per unit (10 units)" in printed
    assert "  wal_probe: " in printed
    assert "    wal_probe_note: " in printed
    assert "Btree/INSERT_LEAF 5.00" in printed
