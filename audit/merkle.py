"""The Merkle tree of RFC 9162 section 2.1 (the tree of RFC 6962): hashes, the ranges a proof
is made of, and the verification of inclusion and consistency proofs (docs/security.md,
"Verifiable log").

Nothing here touches Django or a database: the log's storage (``audit/log.py``) computes its
roots and proofs with it, and the offline verifier (``audit/verify_bundle.py``), which runs on
an auditor's machine with nothing but the standard library and ``cryptography``, verifies with
the same functions.

Terms: ``D[a:b]`` is the list of leaves a..b-1; ``MTH(D[a:b])`` its Merkle tree hash. A node
``(level, index)`` is the complete subtree of the ``2**level`` leaves from
``index * 2**level``: its hash is stored once made (``audit.models.LogNode``), at the position
``stored_hash_index(level, index)``, so that any range hash a proof needs is assembled from at
most two stored nodes per level."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

Node = tuple[int, int]  # (level, index)
Range = tuple[int, int]  # [start, end) of leaf indexes


class ProofError(ValueError):
    """A proof does not verify, or its parameters are outside what the RFC defines. The
    message says which."""


def leaf_hash(leaf: bytes) -> bytes:
    """``SHA-256(0x00 || leaf)``."""
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n > 1``): the size of the left subtree."""
    return 1 << ((n - 1).bit_length() - 1)


# --- Where hashes are stored -----------------------------------------------------------------


def stored_hash_index(level: int, index: int) -> int:
    """The position of node ``(level, index)`` in the sequence of stored hashes, in the order
    they are made as leaves are appended: each leaf's hash, then the hash of every complete
    subtree that leaf completes (the numbering of Go's checksum database,
    ``golang.org/x/mod/sumdb/tlog.StoredHashIndex``). Appending a batch stores one contiguous
    run of positions."""
    n = index
    for _ in range(level):
        n = 2 * n + 1
    position = 0
    while n > 0:
        position += n
        n >>= 1
    return position + level


def stored_hash_count(size: int) -> int:
    """How many hashes a tree of ``size`` leaves has stored: one position past the last."""
    count = 0
    n = size
    while n > 0:
        count += n
        n >>= 1
    return count


# --- Ranges and the nodes they are made of --------------------------------------------------


def range_nodes(start: int, end: int) -> list[Node]:
    """The complete subtrees that ``D[start:end]`` is made of, left to right, largest first.

    Every range of RFC 9162's recursion starts at a multiple of a power of two at least as
    large as the range, so its Merkle tree hash is these nodes' hashes folded from the right
    (``range_hash``). Another range has no Merkle tree hash of its own: refused."""
    if not 0 <= start < end:
        raise ValueError(f"empty or negative range [{start}, {end})")
    width = end - start
    span = 1 << (width - 1).bit_length()  # the smallest power of two >= width
    if start % span:
        raise ValueError(f"range [{start}, {end}) is not aligned on its own size")
    nodes = []
    while start < end:
        level = (end - start).bit_length() - 1
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def range_hash(hashes: Sequence[bytes]) -> bytes:
    """The Merkle tree hash of a range given the hashes of its ``range_nodes``."""
    value = hashes[-1]
    for left in reversed(hashes[:-1]):
        value = node_hash(left, value)
    return value


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """The ranges whose Merkle tree hashes make the inclusion proof (audit path) of leaf
    ``index`` in the tree of ``size`` leaves, in RFC 9162 order (2.1.3.1, ``PATH``: the
    sibling next to the leaf first, the root's child last)."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is not in a tree of size {size}")
    ranges = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start += k
    ranges.reverse()
    return ranges


def consistency_ranges(size1: int, size2: int) -> list[Range]:
    """The ranges whose Merkle tree hashes make the consistency proof between the trees of
    ``size1`` and ``size2`` leaves, in RFC 9162 order (2.1.4.1, ``SUBPROOF``). Defined for
    ``0 < size1 <= size2``; for equal sizes the proof is empty."""
    if not 0 < size1 <= size2:
        raise ProofError(
            f"a consistency proof needs 0 < size1 <= size2 (got {size1}, {size2})"
        )
    ranges = []
    start, m, n = 0, size1, size2
    whole_old_tree = True  # SUBPROOF's b: still on the path of the old tree's own root
    while m != n:
        k = _split(n)
        if m <= k:
            ranges.append((start + k, start + n))
            n = k
        else:
            ranges.append((start, start + k))
            start += k
            m -= k
            n -= k
            whole_old_tree = False
    if not whole_old_tree:
        ranges.append((start, start + n))
    ranges.reverse()
    return ranges


def proof_nodes(ranges: Iterable[Range]) -> set[Node]:
    """Every node a proof made of ``ranges`` needs: O(log n) of them."""
    return {node for start, end in ranges for node in range_nodes(start, end)}


def proof_hashes(
    ranges: Sequence[Range], hashes: Callable[[set[Node]], dict[Node, bytes]]
) -> list[bytes]:
    """The proof's hashes, given a function that fetches the hashes of a set of nodes at
    once (one query against the database)."""
    fetched = hashes(proof_nodes(ranges))
    return [
        range_hash([fetched[node] for node in range_nodes(start, end)])
        for start, end in ranges
    ]


# --- Building the tree in memory ------------------------------------------------------------


class CompactRange:
    """The right edge of a tree: the hashes of ``range_nodes(0, size)``. Appending a leaf
    yields every node it completes, which is all a store needs to write; ``root()`` is the
    tree's hash. O(log n) memory whatever the size."""

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        nodes = range_nodes(0, size) if size else []
        if len(nodes) != len(hashes):
            raise ValueError(f"a tree of size {size} has {len(nodes)} edge hashes")
        self.size = size
        self._stack: list[tuple[int, int, bytes]] = [
            (level, index, value)
            for (level, index), value in zip(nodes, hashes, strict=True)
        ]

    def append(self, value: bytes) -> list[tuple[Node, bytes]]:
        """Appends a leaf hash; returns the nodes made, the leaf's own first."""
        level, index = 0, self.size
        made = [((0, index), value)]
        while self._stack and self._stack[-1][0] == level:
            _, _, left = self._stack.pop()
            value = node_hash(left, value)
            level, index = level + 1, index >> 1
            made.append(((level, index), value))
        self._stack.append((level, index, value))
        self.size += 1
        return made

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        return range_hash([value for _, _, value in self._stack])


def tree_hash(leaf_hashes: Iterable[bytes]) -> bytes:
    """``MTH`` of the leaves whose hashes are given, in one pass."""
    edge = CompactRange()
    for value in leaf_hashes:
        edge.append(value)
    return edge.root()


# --- Verification (RFC 9162 2.1.3.2 and 2.1.4.2) ------------------------------------------


def _hash_check(value: bytes, what: str) -> None:
    if not isinstance(value, bytes | bytearray) or len(value) != HASH_SIZE:
        raise ProofError(f"{what} is not a {HASH_SIZE}-byte hash")


def root_from_inclusion_proof(
    *, index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes]
) -> bytes:
    """The root that an inclusion proof leads to from a leaf hash, by the algorithm of
    RFC 9162 section 2.1.3.2; raises ``ProofError`` if the proof is malformed for
    (``index``, ``size``) (too short, too long, or an element not a hash)."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is not in a tree of size {size}")
    _hash_check(leaf_hash, "the leaf hash")
    fn, sn = index, size - 1
    r = leaf_hash
    for position, p in enumerate(proof):
        _hash_check(p, f"proof element {position}")
        if sn == 0:
            raise ProofError("the proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the proof is shorter than the tree is deep")
    return r


def inclusion_verify(
    *, index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raises ``ProofError`` unless ``proof`` shows the leaf with hash ``leaf_hash`` at
    ``index`` in the tree of ``size`` leaves whose root is ``root``."""
    _hash_check(root, "the root")
    if (
        root_from_inclusion_proof(
            index=index, size=size, leaf_hash=leaf_hash, proof=proof
        )
        != root
    ):
        raise ProofError("the inclusion proof does not lead to the root")


def consistency_verify(
    *,
    size1: int,
    size2: int,
    root1: bytes,
    root2: bytes,
    proof: Sequence[bytes],
) -> None:
    """Raises ``ProofError`` unless ``proof`` shows that the tree of ``size2`` leaves with
    root ``root2`` extends the tree of ``size1`` leaves with root ``root1``, by the
    algorithm of RFC 9162 section 2.1.4.2. Equal sizes need equal roots and an empty proof;
    a tree of size 0 proves nothing and is refused."""
    _hash_check(root1, "the first root")
    _hash_check(root2, "the second root")
    if not 0 < size1 <= size2:
        raise ProofError(
            f"a consistency proof needs 0 < size1 <= size2 (got {size1}, {size2})"
        )
    if size1 == size2:
        if proof:
            raise ProofError("equal sizes need an empty proof")
        if root1 != root2:
            raise ProofError("equal sizes with different roots")
        return
    if not proof:
        raise ProofError("the proof is empty")
    for position, c in enumerate(proof):
        _hash_check(c, f"proof element {position}")
    path = list(proof)
    if size1 & (size1 - 1) == 0:  # an exact power of 2
        path.insert(0, root1)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the proof is longer than the trees are deep")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the proof is shorter than the trees are deep")
    if fr != root1:
        raise ProofError("the proof does not lead to the first root")
    if sr != root2:
        raise ProofError("the proof does not lead to the second root")
