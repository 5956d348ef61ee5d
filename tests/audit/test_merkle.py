"""The Merkle tree of RFC 9162 section 2.1 (audit/merkle.py), against published test vectors and
two independent implementations: ``tests/audit/rfc9162_reference.py`` (the RFC's recursive
definitions) and pymerkle (a library that implements RFC 9162 proofs).

The vectors in ``tests/audit/data/rfc6962_vectors.json`` are transparency-dev/merkle's (the
Go library behind Trillian and the tlog-tiles ecosystem; Apache-2.0): its leaf inputs with
their node and root hashes (testonly/constants.go), the hasher's vectors
(rfc6962/rfc6962_test.go), expected proofs (cmd/proofgen/main.go) and the verification probes
it generates from them (testdata/inclusion, testdata/consistency); the file's "origin" names
the commit."""

import hashlib
import json
import random
from pathlib import Path

import pytest
from pymerkle import InmemoryTree, verify_consistency, verify_inclusion

from audit import merkle
from tests.audit import rfc9162_reference as ref

VECTORS = json.loads(
    (Path(__file__).parent / "data" / "rfc6962_vectors.json").read_text()
)
LEAVES = [bytes.fromhex(x) for x in VECTORS["leaf_inputs"]]
EXHAUSTIVE = 48  # every (index, size) and every (size1, size2) up to this size


def h(value: str | None) -> bytes:
    return bytes.fromhex(value or "")


class MemoryStore:
    """Every node that appending makes, as the database stores them."""

    def __init__(self, leaves: list[bytes]) -> None:
        self.nodes: dict[merkle.Node, bytes] = {}
        self.positions: list[int] = []
        self.edge = merkle.CompactRange()
        for leaf in leaves:
            for node, value in self.edge.append(merkle.leaf_hash(leaf)):
                self.nodes[node] = value
                self.positions.append(merkle.stored_hash_index(*node))

    def fetch(self, nodes):
        return {node: self.nodes[node] for node in nodes}

    def inclusion(self, index: int, size: int) -> list[bytes]:
        return merkle.proof_hashes(merkle.inclusion_ranges(index, size), self.fetch)

    def consistency(self, size1: int, size2: int) -> list[bytes]:
        return merkle.proof_hashes(merkle.consistency_ranges(size1, size2), self.fetch)

    def root(self, size: int) -> bytes:
        if size == 0:
            return merkle.EMPTY_ROOT
        nodes = merkle.range_nodes(0, size)
        return merkle.range_hash([self.nodes[n] for n in nodes])


def some_leaves(count: int) -> list[bytes]:
    rng = random.Random(count)
    return [rng.randbytes(rng.randint(0, 40)) for _ in range(count)]


# --- Published vectors ----------------------------------------------------------------------


def test_hashes_are_the_rfc_s():
    hasher = VECTORS["hasher"]
    assert merkle.EMPTY_ROOT.hex() == hasher["empty_root"]
    assert merkle.leaf_hash(b"").hex() == hasher["empty_leaf"]
    assert merkle.leaf_hash(b"L123456").hex() == hasher["leaf_L123456"]
    assert merkle.node_hash(b"N123", b"N456").hex() == hasher["node_N123_N456"]


def test_roots_and_every_stored_node_match_the_published_tree():
    store = MemoryStore(LEAVES)
    for level, row in enumerate(VECTORS["node_hashes"]):
        for index, value in enumerate(row):
            assert store.nodes[(level, index)].hex() == value
    for size, root in enumerate(VECTORS["root_hashes"]):
        assert (
            merkle.tree_hash(merkle.leaf_hash(x) for x in LEAVES[:size]).hex() == root
        )
        assert store.root(size).hex() == root


@pytest.mark.parametrize(
    "vector", VECTORS["inclusion_proofs"], ids=lambda v: f"{v['index']}@{v['size']}"
)
def test_inclusion_proofs_are_the_published_ones(vector):
    store = MemoryStore(LEAVES)
    proof = store.inclusion(vector["index"], vector["size"])
    assert [p.hex() for p in proof] == vector["proof"]


@pytest.mark.parametrize(
    "vector", VECTORS["consistency_proofs"], ids=lambda v: f"{v['size1']}-{v['size2']}"
)
def test_consistency_proofs_are_the_published_ones(vector):
    store = MemoryStore(LEAVES)
    proof = store.consistency(vector["size1"], vector["size2"])
    assert [p.hex() for p in proof] == vector["proof"]


# The probes hash roots of any length when the sizes are equal; the product refuses anything
# but a 32-byte hash there too.
STRICTER = {
    "testdata/consistency/additional/sizes-are-equal-one-and-proof-is-empty.json"
}


@pytest.mark.parametrize("probe", VECTORS["inclusion_probes"], ids=lambda p: p["file"])
def test_inclusion_verification_probes(probe):
    def verify():
        merkle.inclusion_verify(
            index=probe["index"],
            size=probe["size"],
            leaf_hash=h(probe["leaf_hash"]),
            proof=[h(p) for p in probe["proof"]],
            root=h(probe["root"]),
        )

    if probe["want_error"]:
        with pytest.raises(merkle.ProofError):
            verify()
    else:
        verify()


@pytest.mark.parametrize(
    "probe", VECTORS["consistency_probes"], ids=lambda p: p["file"]
)
def test_consistency_verification_probes(probe):
    def verify():
        merkle.consistency_verify(
            size1=probe["size1"],
            size2=probe["size2"],
            root1=h(probe["root1"]),
            root2=h(probe["root2"]),
            proof=[h(p) for p in probe["proof"]],
        )

    if probe["want_error"] or probe["file"] in STRICTER:
        with pytest.raises(merkle.ProofError):
            verify()
    else:
        verify()


# --- Against independent implementations, exhaustively -------------------------------------


def test_every_inclusion_proof_agrees_with_the_rfc_definition_and_pymerkle():
    leaves = some_leaves(EXHAUSTIVE)
    store = MemoryStore(leaves)
    independent = InmemoryTree(algorithm="sha256")
    for leaf in leaves:
        independent.append_entry(leaf)
    for size in range(1, EXHAUSTIVE + 1):
        root = store.root(size)
        assert root == ref.mth(leaves[:size]) == independent.get_root(size)
        for index in range(size):
            proof = store.inclusion(index, size)
            leaf_hash = merkle.leaf_hash(leaves[index])
            assert proof == ref.path(index, leaves[:size])
            assert ref.root_from_path(index, size, leaf_hash, proof) == root
            theirs = independent.prove_inclusion(index + 1, size)
            assert theirs.path == [leaf_hash, *proof]  # pymerkle puts the leaf first
            verify_inclusion(leaf_hash, root, theirs)
            merkle.inclusion_verify(
                index=index, size=size, leaf_hash=leaf_hash, proof=proof, root=root
            )


def test_every_consistency_proof_agrees_with_the_rfc_definition_and_pymerkle():
    leaves = some_leaves(EXHAUSTIVE)
    store = MemoryStore(leaves)
    independent = InmemoryTree(algorithm="sha256")
    for leaf in leaves:
        independent.append_entry(leaf)
    for size2 in range(1, EXHAUSTIVE + 1):
        root2 = store.root(size2)
        for size1 in range(1, size2 + 1):
            root1 = store.root(size1)
            proof = store.consistency(size1, size2)
            assert proof == ref.proof(size1, leaves[:size2])
            assert ref.roots_from_proof(size1, size2, root1, proof) == (root1, root2)
            # pymerkle's own consistency proof, checked against the roots stored here.
            verify_consistency(
                root1, root2, independent.prove_consistency(size1, size2)
            )
            merkle.consistency_verify(
                size1=size1, size2=size2, root1=root1, root2=root2, proof=proof
            )


def test_any_changed_bit_of_a_proof_or_root_fails():
    leaves = some_leaves(21)
    store = MemoryStore(leaves)
    for index, size in [(0, 21), (13, 21), (20, 21), (5, 8)]:
        proof = store.inclusion(index, size)
        for position in range(len(proof)):
            for bit in (0, 7):
                changed = list(proof)
                value = bytearray(changed[position])
                value[bit % 32] ^= 1 << bit
                changed[position] = bytes(value)
                with pytest.raises(merkle.ProofError):
                    merkle.inclusion_verify(
                        index=index,
                        size=size,
                        leaf_hash=merkle.leaf_hash(leaves[index]),
                        proof=changed,
                        root=store.root(size),
                    )
    for size1, size2 in [(1, 21), (7, 21), (8, 21), (20, 21)]:
        proof = store.consistency(size1, size2)
        for position in range(len(proof)):
            changed = list(proof)
            changed[position] = hashlib.sha256(changed[position]).digest()
            with pytest.raises(merkle.ProofError):
                merkle.consistency_verify(
                    size1=size1,
                    size2=size2,
                    root1=store.root(size1),
                    root2=store.root(size2),
                    proof=changed,
                )


# --- Storage layout -------------------------------------------------------------------------


def test_stored_positions_are_go_s_numbering_and_contiguous():
    # golang.org/x/mod/sumdb/tlog's StoredHashIndex for the first nodes of a tree.
    known = {
        (0, 0): 0,
        (0, 1): 1,
        (1, 0): 2,
        (0, 2): 3,
        (0, 3): 4,
        (1, 1): 5,
        (2, 0): 6,
    }
    for node, position in known.items():
        assert merkle.stored_hash_index(*node) == position
    store = MemoryStore(some_leaves(300))
    assert store.positions == list(range(merkle.stored_hash_count(300)))


def test_a_proof_reads_at_most_two_nodes_per_level():
    for size in (1_000_000, 1_048_576, 999_983):
        for index in (0, size // 3, size - 1):
            nodes = merkle.proof_nodes(merkle.inclusion_ranges(index, size))
            assert len(nodes) <= 2 * size.bit_length()
        for size1 in (1, size // 7, size - 1):
            nodes = merkle.proof_nodes(merkle.consistency_ranges(size1, size))
            assert len(nodes) <= 2 * size.bit_length()


def test_ranges_outside_the_rfc_s_recursion_are_refused():
    with pytest.raises(ValueError, match="aligned"):
        merkle.range_nodes(1, 3)
    with pytest.raises(merkle.ProofError):
        merkle.inclusion_ranges(5, 5)
    with pytest.raises(merkle.ProofError):
        merkle.consistency_ranges(0, 5)
    with pytest.raises(merkle.ProofError):
        merkle.consistency_ranges(6, 5)
