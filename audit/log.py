"""The verifiable log's storage: one Merkle tree (RFC 9162 section 2.1) over every ledger, kept
in PostgreSQL (SQLite for the embedded default) so that appending a batch, a root, an
inclusion proof and a consistency proof each read O(log n) rows (docs/security.md, "Verifiable
log"; docs/subsystems/log.md, "The verifiable log").

Two tables: ``LogLeaf`` (index, kind, record id, the leaf's canonical JSON) and ``LogNode``
(the hash of every complete subtree, at its ``stored_hash_index``). A proof is a handful of
ranges (``audit.merkle``); each range is made of at most one stored node per level; all of
them are read with one query by primary key.

The one write is ``log_append``. Which records become leaves, and when, is its callers'
business: it takes the leaves in the order given."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from django.db import connection, transaction

from . import merkle
from .errors import BeyondTree, InvalidRange
from .leaves import LeafInput, leaf_encode
from .models import LogLeaf, LogNode

logger = logging.getLogger(__name__)

__all__ = [
    "BeyondTree",
    "InvalidRange",
    "LeafInput",
    "LogRange",
    "LogRecomputeReport",
    "TreeRebuild",
    "log_append",
    "log_consistency_proof",
    "log_inclusion_proof",
    "log_leaf_chunks",
    "log_leaves",
    "log_lock",
    "log_root",
    "log_root_recompute",
    "log_size",
]

# Appends are serialised by this transaction-scoped advisory lock on PostgreSQL (SQLite takes
# its one write lock when the transaction starts: the local settings' IMMEDIATE mode). The
# primary keys back it: two appends that read the same size collide on the first index.
_LOG_LOCK_KEY = 0x7106


@dataclass(frozen=True)
class LogRange:
    """What an append made: leaves ``start``..``end - 1``; ``root`` is the tree's hash at
    size ``end``."""

    start: int
    end: int
    root: bytes


def log_lock(*, wait: bool = True) -> bool:
    """Takes the log's append lock for the current transaction (PostgreSQL's
    ``pg_advisory_xact_lock``); with ``wait=False`` returns False at once if another
    transaction holds it. A caller that decides which records to append takes it before it
    reads them (``log_append`` takes it again: the lock is re-entrant)."""
    if not connection.in_atomic_block:
        raise RuntimeError("log_lock needs a transaction (transaction.atomic)")
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOG_LOCK_KEY])
            return True
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_LOG_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def log_size() -> int:
    """The number of leaves in the log (committed, as this transaction sees them)."""
    last = LogLeaf.objects.order_by("-index").values_list("index", flat=True).first()
    return 0 if last is None else last + 1


def _node_hashes(nodes: set[merkle.Node]) -> dict[merkle.Node, bytes]:
    """The stored hashes of ``nodes``, in one query by primary key."""
    if not nodes:
        return {}
    positions = {merkle.stored_hash_index(*node): node for node in nodes}
    found = {
        positions[position]: bytes(value)
        for position, value in LogNode.objects.filter(
            position__in=list(positions)
        ).values_list("position", "hash")
    }
    missing = set(nodes) - set(found)
    if missing:
        # Leaves and nodes are written in one transaction: only a hand-made change gets here.
        raise RuntimeError(f"log nodes missing from storage: {sorted(missing)[:5]}")
    return found


def _size_check(size: int, tree_size: int) -> None:
    if size > tree_size:
        raise BeyondTree(size=size, tree_size=tree_size)


def log_root(*, size: int | None = None) -> tuple[int, bytes]:
    """The tree's (size, root hash), now or at an earlier ``size``: O(log n) stored nodes."""
    tree_size = log_size()
    size = tree_size if size is None else size
    if size < 0:
        raise InvalidRange(f"size {size} is negative")
    _size_check(size, tree_size)
    if size == 0:
        return 0, merkle.EMPTY_ROOT
    nodes = merkle.range_nodes(0, size)
    hashes = _node_hashes(set(nodes))
    return size, merkle.range_hash([hashes[node] for node in nodes])


def log_inclusion_proof(*, index: int, size: int) -> list[bytes]:
    """The inclusion proof of leaf ``index`` in the tree of ``size`` leaves, in RFC 9162
    order. Raises ``InvalidRange`` unless ``0 <= index < size``, ``BeyondTree`` if the tree
    is smaller than ``size``."""
    try:
        ranges = merkle.inclusion_ranges(index, size)
    except merkle.ProofError as exc:
        raise InvalidRange(str(exc)) from None
    _size_check(size, log_size())
    return merkle.proof_hashes(ranges, _node_hashes)


def log_consistency_proof(*, size1: int, size2: int) -> list[bytes]:
    """The consistency proof between the trees of ``size1`` and ``size2`` leaves, in RFC 9162
    order. Raises ``InvalidRange`` unless ``0 < size1 <= size2``, ``BeyondTree`` if the
    tree is smaller than ``size2``."""
    try:
        ranges = merkle.consistency_ranges(size1, size2)
    except merkle.ProofError as exc:
        raise InvalidRange(str(exc)) from None
    _size_check(size2, log_size())
    return merkle.proof_hashes(ranges, _node_hashes)


def _rows_insert(leaf_rows: list[tuple], node_rows: list[tuple]) -> None:
    if connection.vendor == "postgresql":
        # One COPY per table, in PostgreSQL's binary format: set-based like a multi-row
        # INSERT, and ten times cheaper than passing the batch as arrays (psycopg converts
        # arrays in Python; COPY rows in C). 5,000 leaves and their nodes take about 0.1 s.
        leaf_table = connection.ops.quote_name(LogLeaf._meta.db_table)
        node_table = connection.ops.quote_name(LogNode._meta.db_table)
        # COPY goes around Django's cursor: its errors get Django's classes here (a
        # duplicate record is an IntegrityError, as with an INSERT).
        with connection.wrap_database_errors, connection.cursor() as cursor:
            with cursor.copy(
                f'COPY {leaf_table} ("index", kind, record_id, leaf) '
                "FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int8", "varchar", "int8", "text"])
                for row in leaf_rows:
                    copy.write_row(row)
            with cursor.copy(
                f"COPY {node_table} (position, hash) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int8", "bytea"])
                for row in node_rows:
                    copy.write_row(row)
        return
    LogLeaf.objects.bulk_create(
        LogLeaf(index=i, kind=k, record_id=r, leaf=t) for i, k, r, t in leaf_rows
    )
    LogNode.objects.bulk_create(LogNode(position=p, hash=h) for p, h in node_rows)


def log_append(*, leaves: Sequence[LeafInput]) -> LogRange:
    """Appends ``leaves``, in the order given, as one batch: their rows and every node they
    complete, in one transaction (the caller's, if it has one: then the batch commits or
    rolls back with it). Safe with any number of concurrent appenders (``log_lock``); a
    record already in the log (same kind and id) makes the whole batch fail
    (``IntegrityError``): the caller picks records not yet logged under the lock.

    Reads the O(log n) hashes of the tree's right edge, hashes each leaf once, and writes
    one leaf row and on average two node rows per leaf, with one COPY per table on
    PostgreSQL."""
    texts = [(leaf, leaf_encode(leaf)) for leaf in leaves]
    with transaction.atomic():
        log_lock()
        size = log_size()
        if not texts:
            return LogRange(start=size, end=size, root=log_root(size=size)[1])
        edge_nodes = merkle.range_nodes(0, size) if size else []
        stored = _node_hashes(set(edge_nodes))
        edge = merkle.CompactRange(size, [stored[node] for node in edge_nodes])
        leaf_rows, node_rows = [], []
        # Nodes come out of the edge in the order of their stored positions: one
        # contiguous run from the count stored so far (audit.merkle.stored_hash_index).
        position = merkle.stored_hash_count(size)
        for leaf, text in texts:
            index = edge.size
            for _, value in edge.append(merkle.leaf_hash(text.encode())):
                node_rows.append((position, value))
                position += 1
            leaf_rows.append((index, leaf.kind, leaf.record_id, text))
        _rows_insert(leaf_rows, node_rows)
    logger.info(
        "audit.log_appended",
        extra={"start": size, "end": edge.size, "count": len(texts)},
    )
    return LogRange(start=size, end=edge.size, root=edge.root())


def log_leaves(
    *, start: int = 0, end: int | None = None, chunk_size: int = 5000
) -> Iterator[LogLeaf]:
    """The leaves ``start``..``end - 1`` in index order, read in chunks by primary key."""
    position = start
    while end is None or position < end:
        query = LogLeaf.objects.filter(index__gte=position).order_by("index")
        if end is not None:
            query = query.filter(index__lt=end)
        chunk = list(query[:chunk_size])
        if not chunk:
            return
        yield from chunk
        position = chunk[-1].index + 1


class TreeRebuild:
    """The tree recomputed from its leaves' text alone, fed chunk by chunk in index order,
    in O(log n) memory: its root at the end and at each size of ``roots_at`` (what a signed
    checkpoint's root is compared with), and what disagrees with storage: a gap in the
    indexes, a stored node that is not the hash of what it covers. A chunk's stored nodes are
    read as one contiguous run of positions: the nodes a leaf completes follow its own hash,
    in the order ``log_append`` stored them."""

    def __init__(self, *, roots_at: Iterable[int] = ()) -> None:
        self.size = 0
        self.gaps: list[int] = []
        self.altered_nodes: list[int] = []
        self.roots: dict[int, bytes] = {}
        self._wanted = set(roots_at)
        self._stack: list[tuple[int, bytes]] = []

    @property
    def broken(self) -> bool:
        return bool(self.gaps)

    def root(self) -> bytes:
        if not self._stack:
            return merkle.EMPTY_ROOT
        return merkle.range_hash([value for _, value in self._stack])

    def feed(self, chunk: Sequence[tuple[int, str]]) -> None:
        """The next leaves, as (index, text); past a gap nothing more is recomputed."""
        if self.gaps or not chunk:
            return
        first = self.size
        made: list[bytes] = []
        stack, wanted, sha256 = self._stack, self._wanted, hashlib.sha256
        for index, text in chunk:
            if index != self.size:
                self.gaps.append(self.size)
                break
            value = sha256(b"\x00" + text.encode()).digest()
            made.append(value)
            level = 0
            while stack and stack[-1][0] == level:
                value = sha256(b"\x01" + stack.pop()[1] + value).digest()
                level += 1
                made.append(value)
            stack.append((level, value))
            self.size += 1
            if self.size in wanted:
                self.roots[self.size] = self.root()
        start = merkle.stored_hash_count(first)
        stored = dict(
            LogNode.objects.filter(
                position__gte=start, position__lt=start + len(made)
            ).values_list("position", "hash")
        )
        self.altered_nodes.extend(
            start + offset
            for offset, value in enumerate(made)
            if bytes(stored.get(start + offset, b"")) != value
        )


def log_leaf_chunks(
    *, size: int | None = None, chunk_size: int = 5000
) -> Iterator[list[tuple[int, str, int, str]]]:
    """The leaves ``0..size - 1`` as (index, kind, record id, text), chunk by chunk in index
    order, read by primary key."""
    tree_size = log_size() if size is None else size
    position = 0
    while position < tree_size:
        chunk = list(
            LogLeaf.objects.filter(index__gte=position, index__lt=tree_size)
            .order_by("index")
            .values_list("index", "kind", "record_id", "leaf")[:chunk_size]
        )
        if not chunk:
            return
        yield chunk
        position = chunk[-1][0] + 1


@dataclass
class LogRecomputeReport:
    """The tree recomputed from its leaves' text alone: its ``root`` at ``size``, and what
    disagrees with storage (a gap in the indexes, a stored node that is not the hash of what
    it covers)."""

    size: int = 0
    root: bytes = merkle.EMPTY_ROOT
    gaps: list[int] = field(default_factory=list)
    altered_nodes: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.gaps or self.altered_nodes)


def log_root_recompute(
    *, size: int | None = None, chunk_size: int = 5000
) -> LogRecomputeReport:
    """Recomputes the tree from the leaves' text, in one pass and O(log n) memory, and
    compares every stored node with what it should be (``TreeRebuild``): what a verifier of
    the whole log (and a signed checkpoint's root) starts from."""
    rebuild = TreeRebuild()
    tree_size = log_size() if size is None else size
    for chunk in log_leaf_chunks(size=tree_size, chunk_size=chunk_size):
        rebuild.feed([(index, text) for index, _, _, text in chunk])
        if rebuild.broken:
            break
    gaps = list(rebuild.gaps)
    if rebuild.size < tree_size and not gaps:
        gaps.append(rebuild.size)
    return LogRecomputeReport(
        size=rebuild.size,
        root=rebuild.root(),
        gaps=gaps,
        altered_nodes=rebuild.altered_nodes,
    )
