"""What the ledgers' admins show of the verifiable log (``core.admin.evidence``'s
``LogEntryAdminMixin`` and ``EvidenceAdminMixin``): each row's log index and whether the
latest signed checkpoint covers it, and the evidence bundle of a record (docs/security.md,
"The log in the admin")."""

from __future__ import annotations

from typing import Any

from django.db.models import Model, OuterRef, QuerySet, Subquery
from django.utils.html import format_html

from core.admin.evidence import log_admin_hooks_register

from .ledgers import ledger_for_model
from .models import LogCheckpoint, LogLeaf

_UNSET = object()


class LogAdmin:
    def entries_annotate(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """``log_index`` per row (a probe of the log's unique (kind, record_id) index) and
        ``log_checkpoint_size``, the latest checkpoint's (computed once per query)."""
        ledger = ledger_for_model(queryset.model)
        if ledger is None:
            return queryset
        return ledger.with_record_id(queryset).annotate(
            log_index=Subquery(
                LogLeaf.objects.filter(
                    kind=ledger.kind, record_id=OuterRef("log_record_id")
                ).values("index")[:1]
            ),
            log_checkpoint_size=Subquery(
                LogCheckpoint.objects.order_by("-tree_size").values("tree_size")[:1]
            ),
        )

    def entries_keyed(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """``log_record_id`` per row alone (no lookup: ``entries_fill`` reads the entries
        of the rows read)."""
        ledger = ledger_for_model(queryset.model)
        return queryset if ledger is None else ledger.with_record_id(queryset)

    def entries_fill(self, rows: list[Any]) -> None:
        """``log_index`` and ``log_checkpoint_size`` on each of ``rows`` (of one model): the
        log's leaves of their record ids in one query (the log's unique (kind, record_id)
        index), and the latest checkpoint's size."""
        if not rows:
            return
        ledger = ledger_for_model(type(rows[0]))
        if ledger is None:
            return
        # The record id the rows were read with (``entries_keyed``), else the row's own.
        records = [
            getattr(row, "log_record_id", getattr(row, "record_id", row.pk))
            for row in rows
        ]
        indexes = dict(
            LogLeaf.objects.filter(
                kind=ledger.kind, record_id__in=[r for r in records if r is not None]
            ).values_list("record_id", "index")
        )
        size = (
            LogCheckpoint.objects.order_by("-tree_size")
            .values_list("tree_size", flat=True)
            .first()
        )
        for row, record in zip(rows, records, strict=True):
            row.log_index = indexes.get(record)
            row.log_checkpoint_size = size

    def entry_html(self, obj: Model) -> str:
        index = getattr(obj, "log_index", _UNSET)
        size = getattr(obj, "log_checkpoint_size", _UNSET)
        if index is _UNSET or size is _UNSET:
            if ledger_for_model(type(obj)) is None:
                return "-"
            shown: Any = obj
            self.entries_fill([shown])
            index, size = shown.log_index, shown.log_checkpoint_size
        if index is None:
            return "not in the log yet"
        if isinstance(size, int) and isinstance(index, int) and index < size:
            return format_html(
                "#{} <span title='covered by the checkpoint of size {}'>"
                "(in the latest checkpoint)</span>",
                index,
                size,
            )
        return format_html("#{} (not in a checkpoint yet)", index)

    def evidence(self, *, subject: str, pk: int) -> dict[str, Any]:
        from .stories import evidence_bundle

        return evidence_bundle(subject=subject, pk=pk)

    def story_events_html(self, *, subject: str, pk: int) -> str:
        if subject != "research_document":
            return "-"
        from .document_page import document_events_html

        return document_events_html(document_pk=pk)


def admin_hooks_register() -> None:
    log_admin_hooks_register(LogAdmin())
