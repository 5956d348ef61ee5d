"""Building blocks of every app's admin (the audit console): read-only ledgers, counts that stay
bounded on big tables, the confirmation page of actions that need a reason, the read-only
display of stored payloads and headers, and each ledger row's entry in the verifiable log with
the evidence bundle of a record (the ``audit`` app plugs those in: ``log_admin_hooks_register``)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any, Protocol, cast

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Model, QuerySet
from django.db.models.functions import Left, Length
from django.forms.models import BaseInlineFormSet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from rapidfuzz.distance import Indel

from .selectors import COUNT_CAP, capped_count

# --- How the console shows a time and a status (docs/console.md) ---------------------------


# One wording and one colour per status, on every page that shows one (the inbox's
# processing statuses, jobs', bulk replays', idempotency records', attempts' outcomes). The
# tone names the badge's colour in core/static/core/admin.css.
STATUS_WORDS: dict[str, tuple[str, str]] = {
    "received": ("Received", "waiting"),
    "processing": ("Processing", "running"),
    "processed": ("Processed", "ok"),
    "ignored_out_of_order": ("Ignored (out of order)", "ignored"),
    "ignored_duplicate_version": ("Ignored (duplicate version)", "ignored"),
    "ignored_unsupported": ("Ignored (unsupported)", "ignored"),
    "failed": ("Failed", "error"),
    "dead_lettered": ("Dead-lettered", "error"),
    "counted": ("Counted, not started", "waiting"),
    "queued": ("Queued", "waiting"),
    "running": ("Running", "running"),
    "succeeded": ("Succeeded", "ok"),
    "cancelled": ("Cancelled", "ignored"),
    "started": ("Started", "running"),
    "ignored": ("Ignored", "ignored"),
    "retry": ("Retry", "warning"),
    "paused": ("Paused", "warning"),
    "draining": ("Draining", "running"),
    "enabled": ("Enabled", "ok"),
    "disabled": ("Disabled", "error"),
    "stuck": ("Processing (stuck)", "error"),
    # An inbox event that waits because its source is paused (docs/subsystems/relay.md,
    # "Pausing a source").
    "held": ("Held (paused)", "warning"),
    # A trigger attempt's outcome (``deployments.TriggerAttempt.Outcome``).
    "delivered": ("Delivered", "ok"),
    "transient": ("Transient failure", "warning"),
    "ambiguous": ("Ambiguous (may have been acted on)", "warning"),
    "rejected": ("Rejected", "error"),
    "lost": ("Lost (no outcome)", "error"),
    # A research document's state.
    "live": ("Live", "ok"),
    "deleted": ("Deleted", "ignored"),
}


def status_words(status: str) -> str:
    """The words the console shows for ``status``."""
    return STATUS_WORDS.get(status, (status.replace("_", " ").capitalize(), ""))[0]


def status_badge(status: str, detail: str = "") -> str:
    """``status`` as a badge, in its one wording and colour, ``detail`` after the words
    (``Paused since … by …``). Escaped."""
    words, tone = STATUS_WORDS.get(
        status, (status.replace("_", " ").capitalize(), "neutral")
    )
    return format_html(
        '<span class="badge badge-{}" data-status="{}">{}{}</span>',
        tone or "neutral",
        status,
        words,
        f" {detail}" if detail else "",
    )


def status_field_badge(field_name: str, *, description: str = ""):
    """An admin display that shows the model field ``field_name`` (a status, an outcome) as
    its badge, for a list's column or a record's page: ``outcome_badge =
    status_field_badge("outcome")`` on the admin, ``"outcome_badge"`` in its fields."""

    @admin.display(
        description=description or field_name.replace("_", " "), ordering=field_name
    )
    def shown(self, obj) -> str:
        value = getattr(obj, field_name)
        return status_badge(value) if value else "-"

    return shown


class StatusFilter(admin.ChoicesFieldListFilter):
    """A status column's filter, its choices in the badges' words (``STATUS_WORDS``), not
    the model's labels: ``("processing_status", StatusFilter)`` in ``list_filter``."""

    def choices(self, changelist):
        values = iter(str(v) for v, _ in self.field.flatchoices if v is not None)
        for i, choice in enumerate(super().choices(changelist)):
            value = next(values, None) if i else None
            yield {**choice, "display": status_words(value)} if value else choice


# The instants every database takes: a bound beyond either (a day at an end of the calendar,
# in a zone whose offset pushes it past; SQLite's backend converts it to UTC) bounds nothing.
_FIRST_INSTANT = datetime.min.replace(tzinfo=UTC)
_LAST_INSTANT = datetime.max.replace(tzinfo=UTC)


def _within_calendar(value: datetime | None) -> datetime | None:
    """``value`` when its UTC time is a date Python can hold; ``None`` otherwise."""
    if value is None or not _FIRST_INSTANT <= value <= _LAST_INSTANT:
        return None
    return value


class DateRangeFilter(admin.DateFieldListFilter):
    """Django's date filter (any date, today, past 7 days, this month, this year) with a
    range of days below it: ``<field>__from`` and ``<field>__to`` (``YYYY-MM-DD``, both
    days included, in ``TIME_ZONE``). Put it in ``list_filter`` as ``("received_at",
    DateRangeFilter)``.

    Any day of the calendar is an end (``9999-12-31`` as the last: everything up to the
    calendar's end, which has no "day after"); an end that is not a day of it (``10000-01-01``,
    ``2026-02-30``, ``yesterday``) is named in an error on the page and beside the field, and
    left out of the range (docs/security.md, "Values the database refuses")."""

    template = "admin/date_range_filter.html"

    def __init__(self, field, request, params, model, model_admin, field_path):
        self.lookup_kwarg_from = f"{field_path}__from"
        self.lookup_kwarg_to = f"{field_path}__to"
        self.errors: list[str] = []
        label = f"{field.verbose_name} {{}}"
        self.first_day = self._day(
            request, label.format("from"), params.pop(self.lookup_kwarg_from, None)
        )
        self.last_day = self._day(
            request, label.format("to"), params.pop(self.lookup_kwarg_to, None)
        )
        self.day_from = self.first_day.isoformat() if self.first_day else ""
        self.day_to = self.last_day.isoformat() if self.last_day else ""
        super().__init__(field, request, params, model, model_admin, field_path)
        if self.day_from or self.day_to:
            self.used_parameters[self.lookup_kwarg_from] = self.day_from
            self.used_parameters[self.lookup_kwarg_to] = self.day_to
        mine = {*self.expected_parameters(), "p"}
        # The page's other parameters (filters, search, ordering), kept by the range's form.
        self.other_params = [
            (name, value)
            for name, values in request.GET.lists()
            if name not in mine
            for value in values
        ]

    def _day(self, request: HttpRequest, label: str, values: Any) -> date | None:
        value = values[-1] if isinstance(values, list) else values
        if not value:
            return None
        try:
            return date.fromisoformat(value)
        except ValueError:
            error = (
                f"{label}: {value[:40]!r} is not a day of the calendar (YYYY-MM-DD, "
                f"{date.min.isoformat()} to {date.max.isoformat()}); the list is not "
                "filtered by it."
            )
            self.errors.append(error)
            message_once(request, error)
            return None

    def expected_parameters(self):
        return [
            *super().expected_parameters(),
            self.lookup_kwarg_from,
            self.lookup_kwarg_to,
        ]

    def queryset(self, request, queryset):
        used = dict(self.used_parameters)
        self.used_parameters = {
            k: v
            for k, v in used.items()
            if k not in (self.lookup_kwarg_from, self.lookup_kwarg_to)
        }
        queryset = super().queryset(request, queryset)
        self.used_parameters = used
        zone = timezone.get_current_timezone()
        # A bound past an end of the calendar (the day after its last, its first day in a
        # zone east of UTC) bounds nothing: every stored instant lies within it.
        start = end = None
        if self.first_day:
            start = _within_calendar(datetime.combine(self.first_day, time(), zone))
        if self.last_day and self.last_day < date.max:
            end = _within_calendar(
                datetime.combine(self.last_day + timedelta(days=1), time(), zone)
            )
        if start is not None:
            queryset = queryset.filter(**{f"{self.field_path}__gte": start})
        if end is not None:
            queryset = queryset.filter(**{f"{self.field_path}__lt": end})
        return queryset


def message_once(request: HttpRequest, text: str) -> None:
    """An error message on the page, once however often the list builds its filters (it
    builds them again for each filter's counts)."""
    shown = request.__dict__.setdefault("_console_errors_shown", set())
    if text not in shown:
        shown.add(text)
        messages.error(request, text)


class _CalendarEndsChangeList(ChangeList):
    """Django's changelist, whose date hierarchy answers the periods at the ends of the
    calendar: Django bounds a period by the start of the next one, which Python's dates
    cannot hold after the year 9999 (an ``OverflowError``, a 500), and SQLite's backend
    converts each bound to UTC, which overflows before the year 1 in a zone east of UTC.
    Such a period is bounded by the ends it has: the year 9999 is everything from its start."""

    def get_filters(self, request):
        period = self._period_at_an_end()
        if period is None:
            return super().get_filters(request)
        field = self.date_hierarchy
        names = {f"{field}__year", f"{field}__month", f"{field}__day"}
        given = self.filter_params
        self.filter_params = {k: v for k, v in given.items() if k not in names}
        try:
            specs, has_filters, lookups, duplicates, _ = super().get_filters(request)
        finally:
            self.filter_params = given
        # As Django gives its own bounds of a period: lists of instants.
        start, end = period
        bounds = cast(dict[str, Any], lookups)
        if start is not None:
            bounds[f"{field}__gte"] = [start]
        if end is not None:
            bounds[f"{field}__lt"] = [end]
        return specs, has_filters, lookups, duplicates, True

    def _period_at_an_end(self) -> tuple[datetime | None, datetime | None] | None:
        """The bounds of the period the hierarchy names, each ``None`` where it lies past
        an end of the calendar, when one does; ``None`` when Django's own bounds hold (and
        for a period that is not one: Django names that)."""
        field = self.date_hierarchy
        if not field or not settings.USE_TZ:
            return None
        year, month, day = (
            self.filter_params.get(f"{field}__{part}")
            for part in ("year", "month", "day")
        )
        if not year:
            return None
        try:
            first = datetime(
                int(year[-1]),
                int(month[-1]) if month else 1,
                int(day[-1]) if day else 1,
            )
        except ValueError:
            return None
        after: datetime | None
        try:
            if day:
                after = first + timedelta(days=1)
            elif month:
                after = (first + timedelta(days=32)).replace(day=1)
            else:
                after = first.replace(year=first.year + 1)
        except (OverflowError, ValueError):
            after = None
        start = _within_calendar(timezone.make_aware(first))
        end = _within_calendar(timezone.make_aware(after) if after else None)
        if start is not None and end is not None:
            return None
        return start, end


class BoundedCountPaginator(Paginator):
    """Counts at most ``COUNT_CAP + 1`` rows: a changelist page never runs a full ``COUNT(*)``.
    Past the cap, narrow the list with a filter or the date hierarchy."""

    @cached_property
    def cap(self) -> int:
        return COUNT_CAP

    @cached_property
    def count(self) -> int:
        return capped_count(cast(QuerySet, self.object_list), cap=self.cap)

    @property
    def is_capped(self) -> bool:
        return self.count > self.cap


# The mixins below are combined with the admin's classes; the type checker sees them as what
# they extend, so that their attributes and ``super()`` calls are checked against those.
if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin
    _InlineAdmin = admin.options.InlineModelAdmin
else:
    _ModelAdmin = _InlineAdmin = object


_CALENDAR_ENDS_CHANGELISTS: dict[type[ChangeList], type[ChangeList]] = {}


class CalendarEndsAdminMixin(_ModelAdmin):
    """Every list of the console answers a date at the ends of the calendar, and names a
    filter it cannot use (docs/security.md, "Values the database refuses"). The console's
    site mixes it into every admin it registers (``core.admin_site.AuditAdminSite``), the
    third-party apps' included."""

    def get_changelist(self, request, **kwargs):
        changelist = super().get_changelist(request, **kwargs)
        if changelist is ChangeList:
            return _CalendarEndsChangeList
        if issubclass(changelist, _CalendarEndsChangeList):
            return changelist
        if changelist not in _CALENDAR_ENDS_CHANGELISTS:
            _CALENDAR_ENDS_CHANGELISTS[changelist] = type(
                changelist.__name__, (_CalendarEndsChangeList, changelist), {}
            )
        return _CALENDAR_ENDS_CHANGELISTS[changelist]

    def get_changelist_instance(self, request):
        try:
            return super().get_changelist_instance(request)
        except IncorrectLookupParameters:
            # Django then shows the list without its filters (``?e=1``): say why.
            message_once(
                request,
                "A filter of this list was not understood (a date outside "
                f"{date.min.isoformat()} to {date.max.isoformat()}, a value that is not "
                "a date, or a field the list does not have): the list is shown without "
                "its filters.",
            )
            raise


class _NoWritesMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdminMixin(_NoWritesMixin, _ModelAdmin):
    """Ledgers are browsable, never added, changed or deleted through the admin."""

    show_full_result_count = False
    paginator = BoundedCountPaginator
    change_list_template = "admin/bounded_change_list.html"


class ReadOnlyInlineMixin(_NoWritesMixin, _InlineAdmin):
    """An inline of a ledger: shown on its parent's page, never edited there."""

    extra = 0
    can_delete = False


class StatusBadgesMixin(_ModelAdmin):
    """A record's page that shows its status fields as badges, each in its field's place:
    ``status_badges = {"status": "status_badge"}`` names the display that replaces the
    field (list it in ``readonly_fields`` too)."""

    status_badges: dict[str, str] = {}

    def get_fields(self, request, obj=None):
        shown: list[Any] = []
        for entry in super().get_fields(request, obj):
            if isinstance(entry, str):
                entry = self.status_badges.get(entry, entry)
            if entry not in shown:
                shown.append(entry)
        return shown


class PagedInlineFormSet(BaseInlineFormSet):
    """The rows of one page of an inline: a parent with thousands of children renders
    ``per_page`` of them (the page ``page_number`` names, the nearest one when it names
    none)."""

    per_page = 50
    page_param = "page"
    page_number: str | None = None

    def get_queryset(self):
        if not hasattr(self, "_page_rows"):
            paginator = Paginator(super().get_queryset(), self.per_page)
            self.page = paginator.get_page(self.page_number)
            self._page_rows = self.page.object_list
        return self._page_rows


class PagedInlineMixin(_InlineAdmin):
    """An inline shown a page at a time: ``?<page_param>=N`` on the parent's page picks the
    page; the links under the table move between them."""

    formset = PagedInlineFormSet
    template = "admin/edit_inline/paged_tabular.html"
    page_param = "page"
    per_page = 50

    def get_formset(self, request, obj=None, **kwargs):
        formset = cast(
            type[PagedInlineFormSet], super().get_formset(request, obj, **kwargs)
        )
        formset.page_param = self.page_param
        formset.per_page = self.per_page
        formset.page_number = request.GET.get(self.page_param)
        return formset


def fieldset_fields(fieldsets: Any) -> tuple[str, ...]:
    """The names of the fields that ``fieldsets`` shows, in order (a detail page whose every
    field is read-only declares them once, as its fieldsets)."""
    names: list[str] = []
    for _, options in fieldsets:
        for entry in options["fields"]:
            names.extend([entry] if isinstance(entry, str) else entry)
    return tuple(names)


# How much of a long text field (a job's detail, say) a page shows: the database sends the
# page this much of it, and its length.
TEXT_SHOWN_MAX = 1000


def text_head_annotate(queryset, *, field: str):
    """``queryset`` without ``field``'s text, with its first ``TEXT_SHOWN_MAX`` + 1
    characters as ``<field>_head`` and its length as ``<field>_length``."""
    return queryset.defer(field).annotate(
        **{
            f"{field}_head": Left(field, TEXT_SHOWN_MAX + 1),
            f"{field}_length": Length(field),
        }
    )


def text_head(obj, *, field: str) -> str:
    """What ``text_head_annotate`` kept of ``field``, with a note of its full length when
    it was cut. Escaped."""
    head, length = getattr(obj, f"{field}_head"), getattr(obj, f"{field}_length")
    if length is None or length <= TEXT_SHOWN_MAX:
        return head or ""
    return format_html(
        "{}&hellip; <em>({} characters; the first {} are shown)</em>",
        head[:TEXT_SHOWN_MAX],
        str(length),
        str(TEXT_SHOWN_MAX),
    )


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
    # "Select all N" (``select_across``) is kept through the confirmation, so that the action
    # acts on what was selected, not only on the rows ticked on the page.
    select_across = request.POST.get("select_across") == "1"
    shown = list(queryset[:20])
    total = capped_count(queryset) if select_across else len(selected)
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "objects": shown,
        "more": max(0, total - len(shown)),
        "more_capped": total > COUNT_CAP,
        "selected": selected,
        "select_across": select_across,
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
    """A JSON value in a ``<pre>`` block, escaped: shown as recorded (``as-recorded``: its
    codes and numbers are the record's, not the console's words)."""
    return format_html('<pre class="as-recorded">{}</pre>', pretty_json(value or {}))


DIFF_MAX_LINES = 2000


def lines_align(left_ids: list[int], right_ids: list[int]):
    """The opcodes of a longest common subsequence of two sequences of line ids (RapidFuzz's
    bit-parallel LCS, compiled: about ``len(left) / 64 * len(right)`` word operations)."""
    return Indel.opcodes(left_ids, right_ids)


def _diff_blocks(
    left: list[str], right: list[str], *, max_rows: int
) -> tuple[list[tuple[str, int, int, int, int]], bool]:
    """``(blocks, complete)``: ``(tag, i1, i2, j1, j2)`` blocks (``equal`` or ``changed``)
    that cover at least the first ``max_rows`` rows of the side-by-side diff of ``left`` and
    ``right``; ``complete`` when they cover all of it.

    The work is linear in the lines plus one alignment of at most ``max_rows`` lines of each
    side: the common head and tail are found by comparing lines in order, and of the middle
    only what a page can show is aligned (every row shows at least one line of one side, so
    the first ``max_rows`` rows never need the lines past them)."""
    n, m = len(left), len(right)
    head = 0
    while head < min(n, m) and left[head] == right[head]:
        head += 1
    tail = 0
    while tail < min(n, m) - head and left[n - 1 - tail] == right[m - 1 - tail]:
        tail += 1
    blocks = [("equal", 0, head, 0, head)] if head else []
    room = max_rows - head
    if room <= 0:
        return blocks, head == n == m
    middle_left, middle_right = left[head : n - tail], right[head : m - tail]
    complete = len(middle_left) <= room and len(middle_right) <= room
    middle_left, middle_right = middle_left[:room], middle_right[:room]
    if middle_left and middle_right:
        ids: dict[str, int] = {}
        opcodes = lines_align(
            [ids.setdefault(line, len(ids)) for line in middle_left],
            [ids.setdefault(line, len(ids)) for line in middle_right],
        )
        for tag, i1, i2, j1, j2 in opcodes:
            tag = "equal" if tag == "equal" else "changed"
            if tag == "changed" and blocks and blocks[-1][0] == "changed":
                # A deletion next to an insertion: one changed block, side by side.
                _, i1, _, j1, _ = blocks.pop()
                i1, j1 = i1 - head, j1 - head
            blocks.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    elif middle_left or middle_right:
        blocks.append(
            ("changed", head, head + len(middle_left), head, head + len(middle_right))
        )
    if complete and tail:
        blocks.append(("equal", n - tail, n, m - tail, m))
    return blocks, complete


def side_by_side_diff(
    left: str, right: str, *, max_lines: int = DIFF_MAX_LINES
) -> tuple[str, bool]:
    """Two texts side by side, line against line, changed lines marked; ``(html, truncated)``.

    Bounded whatever the texts, in work and in output: whole lines are compared (no
    character-level pass), the work is linear in the lines plus one alignment of at most
    ``max_lines`` lines of each text (``_diff_blocks``), and at most ``max_lines`` rows are
    rendered. ``difflib.SequenceMatcher`` over all lines, which this replaced, was quadratic
    on a body that interleaves a new line after every original one. Every text is escaped."""
    left_lines, right_lines = left.splitlines(), right.splitlines()
    blocks, complete = _diff_blocks(left_lines, right_lines, max_rows=max_lines)
    rows: list[tuple[str, str, str, str, str]] = []
    full = False
    for tag, i1, i2, j1, j2 in blocks:
        css = "diff-same" if tag == "equal" else "diff-changed"
        for k in range(max(i2 - i1, j2 - j1)):
            if len(rows) >= max_lines:
                full = True
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
        if full:
            break
    truncated = full or not complete
    body = format_html_join(
        "\n",
        '<tr class="{}"><td class="diff-no">{}</td><td><pre>{}</pre></td>'
        '<td class="diff-no">{}</td><td><pre>{}</pre></td></tr>',
        rows,
    )
    table = format_html(
        '<table class="side-by-side-diff as-recorded">'
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
