"""What the apps' admins mix in: the site's answer to a date at the ends of the calendar,
read-only ledgers and their inlines, status fields shown as badges, inlines a page at a time.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList

from .filters import CalendarEndsChangeList, message_once
from .pagination import BoundedCountPaginator, LongListChangeList, PagedInlineFormSet

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
            return CalendarEndsChangeList
        if issubclass(changelist, CalendarEndsChangeList):
            return changelist
        if changelist not in _CALENDAR_ENDS_CHANGELISTS:
            _CALENDAR_ENDS_CHANGELISTS[changelist] = type(
                changelist.__name__, (CalendarEndsChangeList, changelist), {}
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


class LongListAdminMixin(_ModelAdmin):
    """A list of millions of rows: sorted in an order no index gives only once it is
    narrowed to ``COUNT_CAP`` rows (``pagination.LongListChangeList``). ``index_orders``
    names the orders an index gives the whole list in, each read either way: the fields of
    an index, ``-`` before a descending one (the primary key Django ends a sort with aside).
    No counts beside the filters' choices (Django's facets): each filter's would count
    every row of the list without that filter, every choice of it in one pass."""

    index_orders: tuple[tuple[str, ...], ...] = ()
    # ``newest_first(request, queryset, rows=...)``, when an admin defines it: the whole
    # list in its own order as the page's statements read it, for a page counting up to
    # ``rows`` (``pagination.LongListChangeList``). ``page_rows(request, rows)``, when it
    # defines it: the page's rows, a list, as the list shows them, given what is read for
    # them alone after them.
    show_facets = admin.ShowFacets.NEVER

    def get_changelist(self, request, **kwargs):
        return LongListChangeList


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
