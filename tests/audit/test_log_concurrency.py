"""Two sealers appending to the log at once, with real threads on their own PostgreSQL
connections: both succeed, the batches interleave whole, and the tree is the one computed
in memory from the leaves in index order."""

import pytest

from audit import merkle
from audit.checkpoints import checkpoint_make
from audit.leaves import LeafInput
from audit.log import log_append, log_root_recompute, log_size
from audit.models import LogCheckpoint, LogLeaf, LogNode
from tests.threads import run_together

pytestmark = pytest.mark.django_db(transaction=True)

BATCHES = 15
BATCH = 200


def test_two_sealers_appending_at_once_both_succeed_and_build_one_consistent_tree():
    def sealer(kind: str):
        def run():
            made = []
            for batch in range(BATCHES):
                made.append(
                    log_append(
                        leaves=[
                            LeafInput(kind=kind, record_id=batch * BATCH + i)
                            for i in range(BATCH)
                        ]
                    )
                )
            return made

        return run

    results, errors = run_together([sealer("first_ledger"), sealer("second_ledger")])
    assert errors == []
    total = 2 * BATCHES * BATCH
    assert log_size() == total
    ranges = sorted((r.start, r.end) for made in results for r in made)
    assert ranges == [(i * BATCH, (i + 1) * BATCH) for i in range(2 * BATCHES)]
    for made in results:  # each batch holds one sealer's records, in its order
        for r in made:
            kinds = set(
                LogLeaf.objects.filter(index__gte=r.start, index__lt=r.end).values_list(
                    "kind", flat=True
                )
            )
            assert len(kinds) == 1
    assert LogNode.objects.count() == merkle.stored_hash_count(total)
    report = log_root_recompute()
    assert report.ok and report.size == total
    leaves = LogLeaf.objects.order_by("index").values_list("leaf", flat=True)
    assert report.root == merkle.tree_hash(merkle.leaf_hash(t.encode()) for t in leaves)
    last = max((r for made in results for r in made), key=lambda r: r.end)
    assert last.root == report.root


def test_checkpoints_made_at_once_give_one_checkpoint_per_size():
    log_append(leaves=[LeafInput(kind="sample_record", record_id=i) for i in range(10)])
    results, errors = run_together([checkpoint_make] * 3)
    assert errors == []
    assert len([c for c in results if c is not None]) == 1
    assert list(LogCheckpoint.objects.values_list("tree_size", flat=True)) == [10]
