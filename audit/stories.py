"""The story of a research document, an inbox event or a deployment, as entries of the
verifiable log, and its evidence bundle (docs/security.md, "Evidence bundles"):
``python manage.py audit_bundle`` and the admin's "Download evidence".

- an inbox event: its entry (body hash, headers stored, the secret that verified it by id and
  fingerprint), its raw body, its attempts, the mismatch evidence of conflicting deliveries
  (with their bodies), its body's purge, the revision it produced, and the operator actions
  that touched it (replays, purges, mismatches marked investigated);
- a research document: its revisions, and the story of every event delivered for it: those
  that made a revision, and the others (ignored by its ordering rule, dead-lettered, failed,
  held, still waiting), each with its attempts and the operator actions that replayed it;
- a deployment: its entry (key, repository, commit, environment), its transitions and status
  syncs, and whatever other ledger of ``audit.ledgers`` says it belongs to a deployment.

Each entry in the log that the latest signed checkpoint covers comes with its inclusion
proof. A record of the story that is not in the log yet, or logged after that checkpoint, is
listed under ``"unproven"`` with the reason (the next sealing round proves it).

A story is bounded, however many records its senders and clients make: of each kind, past
``AUDIT_BUNDLE_ENTRIES_PER_KIND`` records, the first half and the latest half are told and
the others are named under ``"omitted"`` (how many, the range of their ids and of their log
indexes); raw bodies past ``AUDIT_BUNDLE_BODY_BYTES`` in all are named by their hash and size.
A record is never told without the ones its entry refers to (a revision's event, a
mismatch's), so what is told verifies on its own; a mismatch left out takes its purge with
it. The records and bodies are chosen before anything is proved: building a bundle costs
what it holds, not what the story holds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Max, Min, Q, QuerySet
from django.db.models.functions import Length

from core.errors import NotFound
from deployments.models import Deployment
from research.models import ResearchDocument
from trail.models import OperatorAction
from webhooks.models import FingerprintMismatch, InboxEvent

from .bundles import bundle_build
from .checkpoints import checkpoint_latest
from .leaves import leaf_encode
from .ledgers import BODY_PURGE, EVIDENCE_PURGE, LEDGERS
from .models import LogLeaf

__all__ = [
    "SUBJECTS",
    "document_events",
    "evidence_bundle",
    "story_records",
    "story_tell",
    "subject_resolve",
]

SUBJECTS = ("research_document", "inbox_event", "deployment")

Record = tuple[str, int]


@dataclass
class _Omitted:
    """Records of one kind left out of a story: how many, and the lowest and highest of
    their ids and of the log indexes of those in the log."""

    count: int = 0
    ids: tuple[int, int] | None = None
    indexes: tuple[int, int] | None = None

    def add(
        self,
        *,
        count: int,
        ids: tuple[int, int] | None,
        indexes: tuple[int | None, int | None],
    ) -> None:
        self.count += count
        self.ids = _span(self.ids, ids)
        low, high = indexes
        if low is not None and high is not None:
            self.indexes = _span(self.indexes, (low, high))

    def as_json(self, kind: str) -> dict[str, Any]:
        return {
            "kind": kind,
            "count": self.count,
            "ids": list(self.ids) if self.ids else None,
            "indexes": list(self.indexes) if self.indexes else None,
        }


def _span(
    one: tuple[int, int] | None, other: tuple[int, int] | None
) -> tuple[int, int] | None:
    if one is None or other is None:
        return one or other
    return min(one[0], other[0]), max(one[1], other[1])


def _halves(limit: int) -> tuple[int, int]:
    """How many of the first and of the latest records of a kind a story keeps."""
    return (limit + 1) // 2, limit // 2


@dataclass
class _Story:
    limit: int
    records: list[Record] = field(default_factory=list)
    omitted: dict[str, _Omitted] = field(default_factory=dict)
    _seen: set[Record] = field(default_factory=set)

    def add(self, kind: str, pks: Iterable[int]) -> None:
        for pk in pks:
            if (kind, pk) not in self._seen:
                self._seen.add((kind, pk))
                self.records.append((kind, pk))

    def add_bounded(self, kind: str, rows: QuerySet[Any]) -> list[int]:
        """Adds the records of ``kind`` that ``rows`` selects, in id order: past the limit,
        the first and the latest, the others counted as omitted (a few queries, whatever
        ``rows`` holds). Returns the ids added."""
        ordered = rows.order_by("pk").values_list("pk", flat=True)
        pks = list(ordered[: self.limit + 1])
        if len(pks) > self.limit:
            first, latest = _halves(self.limit)
            tail = list(rows.order_by("-pk").values_list("pk", flat=True)[:latest])
            pks = pks[:first] + tail[::-1]
            middle = rows.filter(pk__gt=pks[first - 1], pk__lt=pks[first])
            self.omit(kind, middle.values("pk"), **_id_span(middle))
        self.add(kind, pks)
        return pks

    def omit(
        self, kind: str, ids: Any, *, count: int, lowest: int, highest: int
    ) -> None:
        """Counts records of ``kind`` (``ids``: a list, or a query of their ids) as left
        out."""
        if not count:
            return
        indexes = LogLeaf.objects.filter(kind=kind, record_id__in=ids).aggregate(
            low=Min("index"), high=Max("index")
        )
        self.omitted.setdefault(kind, _Omitted()).add(
            count=count,
            ids=(lowest, highest),
            indexes=(indexes["low"], indexes["high"]),
        )

    def bound(self) -> None:
        """The limit over the whole story (a document's revisions each bring their event's
        records): of each kind past it, the first and the latest in the order told. Events
        and jobs are the records the others refer to: they are told whole (a document's
        events are its revisions', and the others of its entity, each bounded already). A
        mismatch left out takes its evidence purge with it."""
        by_kind: dict[str, list[int]] = {}
        for kind, pk in self.records:
            by_kind.setdefault(kind, []).append(pk)
        dropped: set[Record] = set()
        first, latest = _halves(self.limit)
        for kind, pks in by_kind.items():
            if kind in _TOLD_WHOLE or len(pks) <= self.limit:
                continue
            middle = pks[first : len(pks) - latest]
            dropped.update((kind, pk) for pk in middle)
            self.omit(
                kind, middle, count=len(middle), lowest=min(middle), highest=max(middle)
            )
        purges = [
            pk
            for pk in by_kind.get(EVIDENCE_PURGE, ())
            if ("fingerprint_mismatch", pk) in dropped
        ]
        if purges:
            dropped.update((EVIDENCE_PURGE, pk) for pk in purges)
            self.omit(
                EVIDENCE_PURGE,
                purges,
                count=len(purges),
                lowest=min(purges),
                highest=max(purges),
            )
        self.records = [record for record in self.records if record not in dropped]

    def omitted_json(self) -> list[dict[str, Any]]:
        return [item.as_json(kind) for kind, item in self.omitted.items()]


# Kinds other records refer to, told whole; and the purges, which follow their record.
_TOLD_WHOLE = frozenset({"inbox_event", "deployment", BODY_PURGE, EVIDENCE_PURGE})


def _id_span(rows: QuerySet[Any]) -> dict[str, Any]:
    span = rows.aggregate(count=Count("pk"), lowest=Min("pk"), highest=Max("pk"))
    return {
        "count": span["count"],
        "lowest": span["lowest"],
        "highest": span["highest"],
    }


def subject_resolve(*, subject: str, identifier: str) -> int:
    """The primary key of the record an auditor names: a research document by its entity id
    (or primary key), an inbox event by its primary key (or ``<source slug>/<event id>``), a
    deployment by its public id (``dep_...``, or primary key). Raises ``NotFound``."""
    found: int | None = None
    if subject == "research_document":
        found = (
            ResearchDocument.objects.filter(entity_id=identifier)
            .values_list("pk", flat=True)
            .first()
        )
        if found is None and identifier.isdigit():
            found = (
                ResearchDocument.objects.filter(pk=int(identifier))
                .values_list("pk", flat=True)
                .first()
            )
    elif subject == "inbox_event":
        query = InboxEvent.objects.all()
        if identifier.isdigit():
            query = query.filter(pk=int(identifier))
        elif "/" in identifier:
            slug, event_id = identifier.split("/", 1)
            query = query.filter(source__slug=slug, event_id=event_id)
        else:
            query = query.none()
        found = query.values_list("pk", flat=True).first()
    elif subject == "deployment":
        deployments = Deployment.objects.filter(public_id=identifier)
        if identifier.isdigit():
            deployments = Deployment.objects.filter(pk=int(identifier))
        found = deployments.values_list("pk", flat=True).first()
    else:
        raise NotFound(f"unknown subject {subject!r}: one of {', '.join(SUBJECTS)}")
    if found is None:
        raise NotFound(f"no {subject} {identifier!r}")
    return found


def _belonging(story: _Story, subject: str, pk: int) -> dict[str, list[int]]:
    """Adds the records of every ledger that says it belongs to ``subject`` ``pk``
    (``Ledger.belongs_to``), bounded; the ids added, by kind."""
    added: dict[str, list[int]] = {}
    for ledger in LEDGERS.values():
        name = ledger.belongs_to.get(subject)
        if name is None or ledger.kind in (BODY_PURGE, EVIDENCE_PURGE):
            continue
        rows = ledger.model_class._default_manager.filter(**{name: pk})
        added[ledger.kind] = story.add_bounded(ledger.kind, rows)
    return added


def _json_list_contains(field_name: str, values: list[int]) -> list[int]:
    """Operator actions whose JSON list ``field_name`` holds any of ``values``."""
    if not values:
        return []
    if connection.vendor == "postgresql":
        condition = Q()
        for value in values:
            condition |= Q(**{f"{field_name}__contains": [value]})
        return list(
            OperatorAction.objects.filter(condition)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
    # The embedded default's SQLite has no JSON containment: its tables are small.
    path = field_name.split("__")
    wanted = set(values)
    found: list[int] = []
    for pk, stored in OperatorAction.objects.order_by("pk").values_list("pk", path[0]):
        item: Any = stored
        for key in path[1:]:
            item = item.get(key) if isinstance(item, dict) else None
        if isinstance(item, list) and wanted & {v for v in item if isinstance(v, int)}:
            found.append(pk)
    return found


def _events_story(story: _Story, pks: list[int]) -> None:
    """The story of each of the inbox events ``pks``: the event, its attempts and mismatch
    evidence (bounded), its body's purge, and the operator actions that named it or its
    evidence (replays, bulk replays, purges, marked investigated: read once for all of
    them)."""
    mismatches: list[int] = []
    for pk in pks:
        story.add("inbox_event", [pk])
        added = _belonging(story, "inbox_event", pk)
        mismatches += added.get("fingerprint_mismatch", [])
    story.add(
        BODY_PURGE,
        list(
            InboxEvent.objects.filter(pk__in=pks, body_purged_at__isnull=False)
            .order_by("pk")
            .values_list("pk", flat=True)
        ),
    )
    story.add(
        EVIDENCE_PURGE,
        list(
            FingerprintMismatch.objects.filter(
                pk__in=mismatches, body_purged_at__isnull=False
            )
            .order_by("pk")
            .values_list("pk", flat=True)
        ),
    )
    story.add(
        "operator_action",
        sorted(
            {
                *_json_list_contains("event_ids", pks),
                *_json_list_contains("details__mismatch_ids", mismatches),
            }
        ),
    )


def document_events(*, document_pk: int) -> QuerySet[InboxEvent]:
    """Every inbox event delivered for a research document, whatever became of it (applied,
    ignored by the ordering rule, dead-lettered, failed, held, waiting): the events of its
    entity id. Its page lists them (``audit.document_page``) and its bundle tells them."""
    entity_id = (
        ResearchDocument.objects.filter(pk=document_pk)
        .values_list("entity_id", flat=True)
        .first()
    )
    if entity_id is None:
        return InboxEvent.objects.none()
    return InboxEvent.objects.filter(entity_id=entity_id)


def story_tell(*, subject: str, pk: int, limit: int) -> _Story:
    """The records of the story, in the order told, at most ``limit`` of each kind (see
    the module's docstring), and what was left out."""
    if limit < 2:
        raise ValueError("a story keeps at least the first and the latest of a kind")
    story = _Story(limit=limit)
    if subject == "inbox_event":
        _events_story(story, [pk])
    elif subject == "research_document":
        revisions = LEDGERS["document_revision"].model_class._default_manager
        kept = story.add_bounded("document_revision", revisions.filter(document_id=pk))
        events = dict(revisions.filter(pk__in=kept).values_list("pk", "inbox_event_id"))
        made = [events[revision_pk] for revision_pk in kept]
        # Every other event delivered for it (ignored, dead-lettered, failed, held, ...),
        # bounded as the revisions are: the first and the latest, the others named.
        others = story.add_bounded(
            "inbox_event",
            document_events(document_pk=pk).exclude(
                pk__in=revisions.filter(document_id=pk).values("inbox_event_id")
            ),
        )
        _events_story(story, [*made, *others])
    elif subject == "deployment":
        story.add("deployment", [pk])
        _belonging(story, "deployment", pk)
    else:
        raise NotFound(f"unknown subject {subject!r}: one of {', '.join(SUBJECTS)}")
    story.bound()
    return story


def story_records(*, subject: str, pk: int, limit: int | None = None) -> list[Record]:
    """The (kind, record id) of every record of the story told, in the order told."""
    limit = limit or settings.AUDIT_BUNDLE_ENTRIES_PER_KIND
    return story_tell(subject=subject, pk=pk, limit=limit).records


def _bodies(
    records: list[Record], *, budget: int
) -> tuple[list[bytes], list[dict[str, Any]]]:
    """The raw bodies the records' entries name (inbox events', mismatches'), in the order
    told, while their sizes add up to at most ``budget`` bytes; the others by hash and
    size."""
    sources = (
        ("inbox_event", InboxEvent, "payload_hash"),
        ("fingerprint_mismatch", FingerprintMismatch, "conflicting_payload_hash"),
    )
    sizes: dict[Record, tuple[str, int]] = {}
    for kind, model, hash_field in sources:
        pks = [pk for k, pk in records if k == kind]
        for pk, digest, size in (
            model.objects.filter(pk__in=pks, raw_body__isnull=False)
            .annotate(size=Length("raw_body"))
            .values_list("pk", hash_field, "size")
        ):
            sizes[(kind, pk)] = (digest, size)
    chosen: dict[str, list[int]] = {}
    taken: set[str] = set()
    left_out: dict[str, int] = {}
    used = 0
    for record in records:
        if record not in sizes:
            continue
        digest, size = sizes[record]
        if digest in taken:
            continue
        if used + size <= budget:
            used += size
            taken.add(digest)
            left_out.pop(digest, None)
            chosen.setdefault(record[0], []).append(record[1])
        else:
            left_out.setdefault(digest, size)
    bodies = [
        bytes(body or b"")
        for kind, model, _ in sources
        for body in model.objects.filter(pk__in=chosen.get(kind, [])).values_list(
            "raw_body", flat=True
        )
    ]
    return bodies, [
        {"hash": digest, "bytes": size} for digest, size in left_out.items()
    ]


def _unlogged_leaf(kind: str, pk: int) -> tuple[str | None, str]:
    """What the record's leaf would be now, and why it is not in the log yet."""
    ledger = LEDGERS.get(kind)
    if ledger is None or not ledger.scanned:
        return None, "not in the log yet"
    row = (
        ledger.model_class._default_manager.filter(pk=pk)
        .values_list("pk", *ledger.columns())
        .first()
    )
    if row is None:
        return None, "no longer in the database"
    if (
        ledger.ready is not None
        and not ledger.model_class._default_manager.filter(ledger.ready, pk=pk).exists()
    ):
        return None, "not complete yet (logged once it is)"
    [fields] = ledger.leaf_fields([row[1:]])
    return leaf_encode(ledger.leaf(pk, fields)), "not in the log yet"


def evidence_bundle(
    *,
    subject: str,
    pk: int,
    entries_per_kind: int | None = None,
    body_bytes: int | None = None,
) -> dict[str, Any]:
    """The evidence bundle of a record's story: each of its entries in the log with its
    inclusion proof against the latest signed checkpoint, the raw bodies its entries name,
    the checkpoint and the log's public key; records not provable yet under ``"unproven"``
    (``python -m audit.verify_bundle`` lists them). At most ``entries_per_kind`` records of
    each kind and ``body_bytes`` of bodies (``AUDIT_BUNDLE_ENTRIES_PER_KIND``,
    ``AUDIT_BUNDLE_BODY_BYTES`` by default); what is left out is named under
    ``"omitted"``."""
    limit = entries_per_kind or settings.AUDIT_BUNDLE_ENTRIES_PER_KIND
    budget = settings.AUDIT_BUNDLE_BODY_BYTES if body_bytes is None else body_bytes
    story = story_tell(subject=subject, pk=pk, limit=limit)
    records = story.records
    logged: dict[Record, tuple[int, str]] = {}
    by_kind: dict[str, list[int]] = {}
    for kind, record_id in records:
        by_kind.setdefault(kind, []).append(record_id)
    for kind, ids in by_kind.items():
        for record_id, index, text in LogLeaf.objects.filter(
            kind=kind, record_id__in=ids
        ).values_list("record_id", "index", "leaf"):
            logged[(kind, record_id)] = (index, text)
    checkpoint = checkpoint_latest()
    size = checkpoint.tree_size if checkpoint is not None else 0
    proven: list[int] = []
    unproven: list[dict[str, Any]] = []
    for kind, record_id in records:
        if (kind, record_id) in logged:
            index, text = logged[(kind, record_id)]
            if index < size:
                proven.append(index)
                continue
            unproven.append(
                {
                    "kind": kind,
                    "id": record_id,
                    "index": index,
                    "leaf": text,
                    "reason": f"logged at index {index}, after the latest checkpoint "
                    f"(size {size}): the next sealing round signs it",
                }
            )
            continue
        leaf, reason = _unlogged_leaf(kind, record_id)
        entry: dict[str, Any] = {"kind": kind, "id": record_id, "reason": reason}
        if leaf is not None:
            entry["leaf"] = leaf
        unproven.append(entry)
    bodies, bodies_left_out = _bodies(records, budget=budget)
    bundle = bundle_build(indexes=proven, bodies=bodies, checkpoint=checkpoint)
    if unproven:
        bundle["unproven"] = unproven
    omitted: dict[str, Any] = {}
    if story.omitted:
        omitted["entries_per_kind"] = limit
        omitted["records"] = story.omitted_json()
    if bodies_left_out:
        omitted["body_bytes"] = budget
        omitted["bodies"] = bodies_left_out
    if omitted:
        bundle["omitted"] = omitted
    return bundle
