"""The story of a research document, an inbox event or a deployment, as entries of the
verifiable log, and its evidence bundle (docs/security.md, "Evidence bundles"):
``python manage.py audit_bundle`` and the admin's "Download evidence".

- an inbox event: its entry (body hash, headers stored, the secret that verified it by id and
  fingerprint), its raw body, its attempts, the mismatch evidence of conflicting deliveries
  (with their bodies), its body's purge, the revision it produced, and the operator actions
  that touched it (replays, purges, mismatches marked investigated);
- a research document: its revisions, and the story of each event that made one;
- a deployment: its entry (key, repository, commit, environment), its transitions and status
  syncs, and whatever other ledger of ``audit.ledgers`` says it belongs to a deployment.

Each entry in the log that the latest signed checkpoint covers comes with its inclusion
proof. A record of the story that is not in the log yet, or logged after that checkpoint, is
listed under ``"unproven"`` with the reason (the next sealing round proves it)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Q

from core.errors import NotFound
from deployments.models import Deployment
from research.models import ResearchDocument
from webhooks.models import FingerprintMismatch, InboxEvent, OperatorAction

from .bundles import bundle_build
from .checkpoints import checkpoint_latest
from .leaves import leaf_encode
from .ledgers import BODY_PURGE, EVIDENCE_PURGE, LEDGERS, Ledger
from .models import LogLeaf

__all__ = ["SUBJECTS", "evidence_bundle", "story_records", "subject_resolve"]

SUBJECTS = ("research_document", "inbox_event", "deployment")

Record = tuple[str, int]


@dataclass
class _Story:
    records: list[Record] = field(default_factory=list)
    _seen: set[Record] = field(default_factory=set)

    def add(self, kind: str, pks: Iterable[int]) -> None:
        for pk in pks:
            if (kind, pk) not in self._seen:
                self._seen.add((kind, pk))
                self.records.append((kind, pk))


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


def _belonging(subject: str, pk: int) -> Iterable[tuple[Ledger, list[int]]]:
    for ledger in LEDGERS.values():
        name = ledger.belongs_to.get(subject)
        if name is None or ledger.kind in (BODY_PURGE, EVIDENCE_PURGE):
            continue
        pks = list(
            ledger.model_class._default_manager.filter(**{name: pk})
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        yield ledger, pks


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


def _event_story(story: _Story, pk: int) -> None:
    story.add("inbox_event", [pk])
    for ledger, pks in _belonging("inbox_event", pk):
        story.add(ledger.kind, pks)
    if InboxEvent.objects.filter(pk=pk, body_purged_at__isnull=False).exists():
        story.add(BODY_PURGE, [pk])
    mismatches = list(
        FingerprintMismatch.objects.filter(event_id=pk).values_list("pk", flat=True)
    )
    story.add(
        EVIDENCE_PURGE,
        list(
            FingerprintMismatch.objects.filter(
                event_id=pk, body_purged_at__isnull=False
            ).values_list("pk", flat=True)
        ),
    )
    story.add(
        "operator_action",
        sorted(
            {
                *_json_list_contains("event_ids", [pk]),
                *_json_list_contains("details__mismatch_ids", mismatches),
            }
        ),
    )


def story_records(*, subject: str, pk: int) -> list[Record]:
    """The (kind, record id) of every record of the story, in the order told."""
    story = _Story()
    if subject == "inbox_event":
        _event_story(story, pk)
    elif subject == "research_document":
        revisions = LEDGERS["document_revision"].model_class._default_manager
        for revision_pk, event_pk in (
            revisions.filter(document_id=pk)
            .order_by("pk")
            .values_list("pk", "inbox_event_id")
        ):
            story.add("document_revision", [revision_pk])
            _event_story(story, event_pk)
    elif subject == "deployment":
        story.add("deployment", [pk])
        for ledger, pks in _belonging("deployment", pk):
            story.add(ledger.kind, pks)
    else:
        raise NotFound(f"unknown subject {subject!r}: one of {', '.join(SUBJECTS)}")
    return story.records


def _bodies(records: list[Record]) -> list[bytes]:
    events = [pk for kind, pk in records if kind == "inbox_event"]
    mismatches = [pk for kind, pk in records if kind == "fingerprint_mismatch"]
    bodies = [
        bytes(body or b"")
        for body in InboxEvent.objects.filter(
            pk__in=events, raw_body__isnull=False
        ).values_list("raw_body", flat=True)
    ]
    bodies += [
        bytes(body or b"")
        for body in FingerprintMismatch.objects.filter(
            pk__in=mismatches, raw_body__isnull=False
        ).values_list("raw_body", flat=True)
    ]
    return bodies


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


def evidence_bundle(*, subject: str, pk: int) -> dict[str, Any]:
    """The evidence bundle of a record's story: each of its entries in the log with its
    inclusion proof against the latest signed checkpoint, the raw bodies its entries name,
    the checkpoint and the log's public key; records not provable yet under ``"unproven"``
    (``python -m audit.verify_bundle`` lists them)."""
    records = story_records(subject=subject, pk=pk)
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
    bundle = bundle_build(
        indexes=proven, bodies=_bodies(records), checkpoint=checkpoint
    )
    if unproven:
        bundle["unproven"] = unproven
    return bundle
