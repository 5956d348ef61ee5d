"""Building blocks of every app's admin (the audit console): read-only ledgers, counts that stay
bounded on big tables, the confirmation page of actions that need a reason, the read-only
display of stored payloads and headers, and each ledger row's entry in the verifiable log with
the evidence bundle of a record (the ``audit`` app plugs those in: ``log_admin_hooks_register``)."""

from __future__ import annotations

import difflib
import json
from typing import Any, Protocol

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from .selectors import COUNT_CAP, capped_count


class BoundedCountPaginator(Paginator):
    """Counts at most ``COUNT_CAP + 1`` rows: a changelist page never runs a full ``COUNT(*)``.
    Past the cap, narrow the list with a filter or the date hierarchy."""

    @cached_property
    def cap(self) -> int:
        return COUNT_CAP

    @cached_property
    def count(self) -> int:
        return capped_count(self.object_list, cap=self.cap)

    @property
    def is_capped(self) -> bool:
        return self.count > self.cap


class _NoWritesMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdminMixin(_NoWritesMixin):
    """Ledgers are browsable, never added, changed or deleted through the admin."""

    show_full_result_count = False
    paginator = BoundedCountPaginator
    change_list_template = "admin/bounded_change_list.html"


class ReadOnlyInlineMixin(_NoWritesMixin):
    """An inline of a ledger: shown on its parent's page, never edited there."""

    extra = 0
    can_delete = False


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=2000,
        help_text="Recorded with the operator action; auditors read it.",
    )


def confirm_with_reason(
    modeladmin: admin.ModelAdmin,
    request,
    queryset,
    *,
    action: str,
    title: str,
    intro: str,
    submit_label: str,
    label: str = "Reason",
    form_class: type[ReasonForm] = ReasonForm,
):
    """First call: the confirmation page asking for a reason (returns a response). Second call
    (the page posted back with ``post``): returns the cleaned reason (the whole cleaned data
    with another ``form_class``), or the page again with errors."""
    form = form_class(request.POST if request.POST.get("post") else None)
    form.fields["reason"].label = label
    if request.POST.get("post") and form.is_valid():
        if form_class is ReasonForm:
            return form.cleaned_data["reason"]
        return form.cleaned_data
    selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
    shown = list(queryset[:20])
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "objects": shown,
        "more": max(0, len(selected) - len(shown)),
        "selected": selected,
        "action": action,
        "form": form,
        "submit_label": submit_label,
        "opts": modeladmin.model._meta,
    }
    return TemplateResponse(request, "admin/confirm_action.html", context)


def admin_link(obj, text: str | None = None) -> str:
    """A link to the object's admin page, or its text when it has none."""
    try:
        url = reverse(
            f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk]
        )
    except NoReverseMatch:
        return str(text or obj)
    return format_html('<a href="{}">{}</a>', url, text or obj)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON; a structure too deep to indent stays on one line."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except RecursionError:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)


def pretty_body(raw: bytes | memoryview | None) -> str:
    """A stored body as indented JSON when it parses, else as (replaced) text. Whatever was
    stored renders: nothing here may fail on a body that ingest accepted. Not yet escaped."""
    if raw is None:
        return ""
    data = bytes(raw)
    try:
        return pretty_json(json.loads(data))
    except (ValueError, RecursionError):
        return data.decode("utf-8", errors="replace")


def json_block(value: Any):
    """A JSON value in a ``<pre>`` block, escaped."""
    return format_html("<pre>{}</pre>", pretty_json(value or {}))


DIFF_MAX_LINES = 2000


def side_by_side_diff(
    left: str, right: str, *, max_lines: int = DIFF_MAX_LINES
) -> tuple[str, bool]:
    """Two texts side by side, line against line, changed lines marked; ``(html, truncated)``.

    Bounded whatever the texts: lines are matched with ``SequenceMatcher`` over whole lines
    only (no character-level pass inside changed blocks, which is what makes ``HtmlDiff``
    take minutes on two long, similar, reordered bodies), and at most ``max_lines`` rows are
    rendered. Every text is escaped."""
    left_lines, right_lines = left.splitlines(), right.splitlines()
    matcher = difflib.SequenceMatcher(None, left_lines, right_lines)
    rows: list[tuple[str, str, str, str, str]] = []
    truncated = False
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        css = "diff-same" if tag == "equal" else "diff-changed"
        for k in range(max(i2 - i1, j2 - j1)):
            if len(rows) >= max_lines:
                truncated = True
                break
            i, j = i1 + k, j1 + k
            rows.append(
                (
                    css,
                    str(i + 1) if i < i2 else "",
                    left_lines[i] if i < i2 else "",
                    str(j + 1) if j < j2 else "",
                    right_lines[j] if j < j2 else "",
                )
            )
        if truncated:
            break
    body = format_html_join(
        "\n",
        '<tr class="{}"><td class="diff-no">{}</td><td><pre>{}</pre></td>'
        '<td class="diff-no">{}</td><td><pre>{}</pre></td></tr>',
        rows,
    )
    table = format_html(
        '<table class="side-by-side-diff">'
        "<thead><tr><th></th><th>original</th><th></th><th>conflicting</th></tr></thead>"
        "<tbody>{}</tbody></table>",
        body,
    )
    return table, truncated


# --- The verifiable log in every ledger's admin ---------------------------------------------


class LogAdminHooks(Protocol):
    """What the ``audit`` app provides to the ledgers' admins (docs/security.md, "The log in
    the admin"): the apps below it cannot import it."""

    def entries_annotate(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The rows with their log index and the latest checkpoint's size (one query)."""
        ...

    def entry_html(self, obj: Model) -> str:
        """A row's entry: its index and whether the latest checkpoint covers it."""
        ...

    def evidence(self, *, subject: str, pk: int) -> dict[str, Any]:
        """The evidence bundle of a record (``python manage.py audit_bundle``)."""
        ...


_log_hooks: list[LogAdminHooks] = []


def log_admin_hooks_register(hooks: LogAdminHooks) -> None:
    _log_hooks[:] = [hooks]


def _hooks() -> LogAdminHooks | None:
    return _log_hooks[0] if _log_hooks else None


class LogEntryAdminMixin:
    """A ledger's admin (or inline) that shows each row's entry in the verifiable log: list
    ``"log_entry"`` in ``list_display``, ``fields`` or ``readonly_fields``."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)  # type: ignore[misc]
        hooks = _hooks()
        return hooks.entries_annotate(queryset) if hooks else queryset

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
