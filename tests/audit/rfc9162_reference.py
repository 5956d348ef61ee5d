"""A deliberately separate, minimal reading of RFC 9162 section 2.1 for the tests: the
recursive definitions of ``MTH``, ``PATH`` and ``SUBPROOF`` over a list of leaves, and proof
verifiers that rebuild the roots by the same recursion. It shares no code with
``audit/merkle.py`` (which stores subtrees and verifies with the RFC's bit-walking algorithms
of 2.1.3.2 and 2.1.4.2): two readings of the RFC that must agree."""

from __future__ import annotations

import hashlib


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) of section 2.1.1, over the leaves' data."""
    n = len(leaves)
    if n == 0:
        return _h(b"")
    if n == 1:
        return _h(b"\x00" + leaves[0])
    k = _k(n)
    return _h(b"\x01" + mth(leaves[:k]) + mth(leaves[k:]))


def path(m: int, leaves: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) of section 2.1.3.1."""
    n = len(leaves)
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return [*path(m, leaves[:k]), mth(leaves[k:])]
    return [*path(m - k, leaves[k:]), mth(leaves[:k])]


def _subproof(m: int, leaves: list[bytes], b: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if b else [mth(leaves)]
    k = _k(n)
    if m <= k:
        return [*_subproof(m, leaves[:k], b), mth(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), mth(leaves[:k])]


def proof(m: int, leaves: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) of section 2.1.4.1, for 0 < m <= n."""
    return _subproof(m, leaves, True)


def root_from_path(m: int, n: int, leaf_hash: bytes, audit_path: list[bytes]) -> bytes:
    """The root an audit path leads to, by PATH's own recursion (the last element is the
    sibling at the top). Raises ValueError on a path of the wrong length."""
    if n == 1:
        if audit_path:
            raise ValueError("path too long")
        return leaf_hash
    if not audit_path:
        raise ValueError("path too short")
    k = _k(n)
    *rest, sibling = audit_path
    if m < k:
        return _h(b"\x01" + root_from_path(m, k, leaf_hash, rest) + sibling)
    return _h(b"\x01" + sibling + root_from_path(m - k, n - k, leaf_hash, rest))


def roots_from_proof(
    m: int, n: int, old_root: bytes, consistency: list[bytes]
) -> tuple[bytes, bytes]:
    """(old root, new root) that a consistency proof leads to, by SUBPROOF's recursion; the
    old tree's root stands in where SUBPROOF leaves it out."""

    def walk(m: int, n: int, b: bool, items: list[bytes]) -> tuple[bytes, bytes]:
        if m == n:
            if b:
                if items:
                    raise ValueError("proof too long")
                return old_root, old_root
            if len(items) != 1:
                raise ValueError("proof of the wrong length")
            return items[0], items[0]
        if not items:
            raise ValueError("proof too short")
        k = _k(n)
        *rest, sibling = items
        if m <= k:
            old, new = walk(m, k, b, rest)
            return old, _h(b"\x01" + new + sibling)
        old, new = walk(m - k, n - k, False, rest)
        return _h(b"\x01" + sibling + old), _h(b"\x01" + sibling + new)

    return walk(m, n, True, consistency)
