"""Each ledger row's entry in the verifiable log, and the evidence bundle of a record, on the
ledgers' admin pages (docs/security.md, "The log in the admin"). The ``audit`` app provides
them (``log_admin_hooks_register``): the apps below it cannot import it.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html


class LogAdminHooks(Protocol):
    """What the ``audit`` app provides to the ledgers' admins (docs/security.md, "The log in
    the admin"): the apps below it cannot import it."""

    def entries_annotate(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The rows with their log index and the latest checkpoint's size (one query)."""
        ...

    def entries_keyed(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The rows with their record id in the log alone, their entries read after them
        (``entries_fill``)."""
        ...

    def entries_fill(self, rows: list[Any]) -> None:
        """The log index and the latest checkpoint's size on each of ``rows`` (two queries
        for them all)."""
        ...

    def entry_html(self, obj: Model) -> str:
        """A row's entry: its index and whether the latest checkpoint covers it."""
        ...

    def evidence(self, *, subject: str, pk: int) -> dict[str, Any]:
        """The evidence bundle of a record (``python manage.py audit_bundle``)."""
        ...

    def story_events_html(self, *, subject: str, pk: int) -> str:
        """The events of a record's story, as its page lists them (a research document:
        every event delivered for it, with its attempts and the operator actions on it)."""
        ...


_log_hooks: list[LogAdminHooks] = []


def log_admin_hooks_register(hooks: LogAdminHooks) -> None:
    _log_hooks[:] = [hooks]


def _hooks() -> LogAdminHooks | None:
    return _log_hooks[0] if _log_hooks else None


class LogEntryAdminMixin:
    """A ledger's admin (or inline) that shows each row's entry in the verifiable log: list
    ``"log_entry"`` in ``list_display``, ``fields`` or ``readonly_fields``."""

    # Set by a list's admin that reads what its page shows of other tables after the page's
    # rows (``page_rows``, ``core.admin.pagination.LongListChangeList``): each row's entry is
    # then read for the page's rows after them (``log_entries_fill``), where a lookup in the
    # rows' statement names the ledger's kind, a value, so that the statement is planned
    # anew at every load of the list (core/plans.py).
    log_entries_after_rows = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)  # type: ignore[misc]
        hooks = _hooks()
        if hooks is None:
            return queryset
        if self.log_entries_after_rows:
            return hooks.entries_keyed(queryset)
        return hooks.entries_annotate(queryset)

    def log_entries_fill(self, rows: list[Any]) -> list[Any]:
        """``rows`` with their log entries, read for them all (``log_entries_after_rows``)."""
        hooks = _hooks()
        if hooks is not None:
            hooks.entries_fill(rows)
        return rows

    @admin.display(description="log entry")
    def log_entry(self, obj: Model) -> str:
        hooks = _hooks()
        return hooks.entry_html(obj) if hooks else "-"


class EvidenceAdminMixin:
    """A "Download evidence" link on a record's admin page: the JSON evidence bundle of its
    story, proved against the latest signed checkpoint (docs/security.md, "Evidence
    bundles"). List ``"evidence"`` in the page's fields; anyone who may view the record may
    download it."""

    evidence_subject = ""

    def get_urls(self) -> list[URLPattern]:
        opts = self.model._meta  # type: ignore[attr-defined]
        view = self.admin_site.admin_view(self.evidence_view)  # type: ignore[attr-defined]
        return [
            path(
                "<path:object_id>/evidence/",
                view,
                name=f"{opts.app_label}_{opts.model_name}_evidence",
            ),
            *super().get_urls(),  # type: ignore[misc]
        ]

    def evidence_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self.get_object(request, object_id)  # type: ignore[attr-defined]
        if obj is None:
            raise Http404
        if not self.has_view_permission(request, obj):  # type: ignore[attr-defined]
            raise PermissionDenied
        hooks = _hooks()
        if hooks is None:
            raise Http404
        bundle = hooks.evidence(subject=self.evidence_subject, pk=obj.pk)
        response = HttpResponse(
            json.dumps(bundle, indent=2) + "\n", content_type="application/json"
        )
        name = f"evidence-{self.evidence_subject}-{obj.pk}.json"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    @admin.display(description="every event delivered for it")
    def story_events(self, obj: Model) -> str:
        """The events its bundle tells, on its page (list ``"story_events"`` in its
        fields): from the document to each event and the operators who replayed it."""
        hooks = _hooks()
        if obj.pk is None or hooks is None:
            return "-"
        return hooks.story_events_html(subject=self.evidence_subject, pk=obj.pk)

    @admin.display(description="evidence")
    def evidence(self, obj: Model) -> str:
        if obj.pk is None:
            return "-"
        opts = self.model._meta  # type: ignore[attr-defined]
        url = reverse(
            f"admin:{opts.app_label}_{opts.model_name}_evidence", args=[obj.pk]
        )
        return format_html(
            '<a class="button" href="{}" download>Download evidence</a>', url
        )
