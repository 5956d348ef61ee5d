"""The log's storage in PostgreSQL (audit/log.py): what it stores equals the tree computed in
memory, proofs from the database agree with the RFC's definitions, every read is a bounded
number of queries, and what changes behind its back is found."""

import random

import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext

from audit import merkle
from audit.errors import BeyondTree, InvalidRange
from audit.leaves import LeafError, LeafInput, leaf_decode, leaf_encode
from audit.log import (
    log_append,
    log_consistency_proof,
    log_inclusion_proof,
    log_root,
    log_root_recompute,
    log_size,
)
from audit.models import LogLeaf, LogNode
from tests.audit import rfc9162_reference as ref

pytestmark = pytest.mark.django_db


def records(start: int, count: int, kind: str = "sample_record") -> list[LeafInput]:
    rng = random.Random(start)
    return [
        LeafInput(
            kind=kind,
            record_id=start + i,
            fields={"payload_hash": rng.randbytes(32).hex(), "note": f"é{i}"},
        )
        for i in range(count)
    ]


def leaf_bytes(inputs: list[LeafInput]) -> list[bytes]:
    return [leaf_encode(leaf).encode() for leaf in inputs]


def test_a_leaf_is_canonical_json_with_its_kind_and_id():
    text = leaf_encode(
        LeafInput(kind="inbox_event", record_id=7, fields={"b": [1, "ü"], "a": None})
    )
    assert text == '{"a":null,"b":[1,"ü"],"id":7,"kind":"inbox_event"}'
    assert leaf_decode(text) == {
        "a": None,
        "b": [1, "ü"],
        "id": 7,
        "kind": "inbox_event",
    }
    for bad in (
        LeafInput(kind="Inbox", record_id=1),
        LeafInput(kind="inbox event", record_id=1),
        LeafInput(kind="inbox_event", record_id=True),
        LeafInput(kind="inbox_event", record_id=1, fields={"id": 2}),
        LeafInput(kind="inbox_event", record_id=1, fields={"x": float("nan")}),
    ):
        with pytest.raises(LeafError):
            leaf_encode(bad)
    with pytest.raises(LeafError, match="canonical"):
        leaf_decode('{"kind": "inbox_event", "id": 7}')


def test_appended_batches_store_exactly_the_tree_computed_in_memory():
    inputs: list[LeafInput] = []
    for count in (1, 2, 5, 1, 13, 32, 7):
        made = log_append(leaves=records(len(inputs), count))
        assert (made.start, made.end) == (len(inputs), len(inputs) + count)
        inputs += records(len(inputs), count)
        assert made.root == ref.mth(leaf_bytes(inputs))
    data = leaf_bytes(inputs)
    assert log_size() == len(inputs) == 61
    assert [row.leaf.encode() for row in LogLeaf.objects.order_by("index")] == data
    expected = {}
    edge = merkle.CompactRange()
    for leaf in data:
        for node, value in edge.append(merkle.leaf_hash(leaf)):
            expected[merkle.stored_hash_index(*node)] = value
    stored = {p: bytes(v) for p, v in LogNode.objects.values_list("position", "hash")}
    assert stored == expected
    assert len(stored) == merkle.stored_hash_count(61)
    for size in range(62):
        assert log_root(size=size) == (size, ref.mth(data[:size]))


def test_proofs_from_the_database_are_the_rfc_s_for_every_index_size_and_size_pair():
    inputs = records(0, 37)
    for start in range(0, 37, 10):
        log_append(leaves=inputs[start : start + 10])
    data = leaf_bytes(inputs)
    for size in range(1, 38):
        root = ref.mth(data[:size])
        for index in range(size):
            proof = log_inclusion_proof(index=index, size=size)
            assert proof == ref.path(index, data[:size])
            assert (
                ref.root_from_path(index, size, merkle.leaf_hash(data[index]), proof)
                == root
            )
        for size1 in range(1, size + 1):
            proof = log_consistency_proof(size1=size1, size2=size)
            assert proof == ref.proof(size1, data[:size])
            assert ref.roots_from_proof(size1, size, ref.mth(data[:size1]), proof) == (
                ref.mth(data[:size1]),
                root,
            )


def test_each_read_and_each_append_is_a_fixed_number_of_queries():
    log_append(leaves=records(0, 1000))
    with CaptureQueriesContext(connection) as reads:
        log_inclusion_proof(index=617, size=999)
    assert len(reads) == 2  # the tree's size, then every node by primary key
    with CaptureQueriesContext(connection) as reads:
        log_consistency_proof(size1=333, size2=1000)
    assert len(reads) == 2
    with CaptureQueriesContext(connection) as writes:
        log_append(leaves=records(1000, 3000))
    # savepoint, lock, size, right edge, leaves, nodes, release
    assert len(writes) <= 7
    assert log_size() == 4000


def test_bad_ranges_and_sizes_beyond_the_tree_are_refused():
    log_append(leaves=records(0, 5))
    for index, size in [(5, 5), (0, 0), (-1, 3)]:
        with pytest.raises(InvalidRange):
            log_inclusion_proof(index=index, size=size)
    for size1, size2 in [(0, 3), (4, 3), (-1, 2)]:
        with pytest.raises(InvalidRange):
            log_consistency_proof(size1=size1, size2=size2)
    with pytest.raises(BeyondTree) as info:
        log_inclusion_proof(index=1, size=6)
    assert info.value.tree_size == 5
    with pytest.raises(BeyondTree):
        log_consistency_proof(size1=1, size2=6)
    with pytest.raises(BeyondTree):
        log_root(size=6)
    assert log_consistency_proof(size1=5, size2=5) == []


def test_a_record_enters_the_log_once_and_a_failed_batch_leaves_nothing():
    log_append(leaves=records(0, 3))
    with pytest.raises(IntegrityError):
        log_append(leaves=[*records(3, 2), records(1, 1)[0]])
    assert log_size() == 3
    assert LogNode.objects.count() == merkle.stored_hash_count(3)


def test_recomputing_the_tree_from_the_leaves_names_what_was_changed_behind_its_back():
    inputs = records(0, 50)
    log_append(leaves=inputs)
    report = log_root_recompute(chunk_size=16)
    assert report.ok and report.size == 50
    assert report.root == ref.mth(leaf_bytes(inputs))
    table = connection.ops.quote_name(LogNode._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET hash = %s WHERE position = %s",  # noqa: S608
            [b"\x00" * 32, merkle.stored_hash_index(1, 10)],
        )
    assert log_root_recompute(chunk_size=16).altered_nodes == [
        merkle.stored_hash_index(1, 10)
    ]
    leaf_table = connection.ops.quote_name(LogLeaf._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {leaf_table} SET leaf = replace(leaf, '\"id\":7', '\"id\":8') "  # noqa: S608
            'WHERE "index" = 7'
        )
    changed = log_root_recompute(chunk_size=16)
    assert changed.root != report.root  # a signed checkpoint's root no longer matches
    assert merkle.stored_hash_index(0, 7) in changed.altered_nodes
    with connection.cursor() as cursor:
        cursor.execute(f'DELETE FROM {leaf_table} WHERE "index" = 20')  # noqa: S608
    assert log_root_recompute(chunk_size=16).gaps == [20]
