"""Pages that stay cheap on big tables: a changelist's count that stops at ``COUNT_CAP``, a
sort by a column no index orders made only within it, and an inline shown a page at a time
(docs/console.md).
"""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.admin.views.main import ORDER_VAR, ChangeList
from django.core.paginator import Paginator
from django.db.models import F, OrderBy, QuerySet
from django.db.models.constants import LOOKUP_SEP
from django.forms.models import BaseInlineFormSet
from django.utils.functional import cached_property

from ..selectors import COUNT_CAP, capped_count
from .filters import message_once


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


def _named(ordering: list, pk_names: set[str]) -> tuple[str, ...] | None:
    """An ordering as field names (``-`` before a descending one), without the primary key
    Django ends it with; ``None`` when an expression other than a field orders it."""
    names = []
    for entry in ordering:
        if isinstance(entry, str):
            names.append(entry)
        elif isinstance(entry, OrderBy) and isinstance(entry.expression, F):
            names.append(("-" if entry.descending else "") + entry.expression.name)
        else:
            return None
    while names and names[-1].removeprefix("-") in pk_names:
        names.pop()
    return tuple(names)


def _reversed(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n.removeprefix("-") if n.startswith("-") else f"-{n}" for n in names)


class LongListChangeList(ChangeList):
    """A list of millions of rows (docs/console.md, "Sorting a long list" and "A list that
    fits one page").

    Sorted, at the header's click, in an order no index gives only while it holds at most
    ``COUNT_CAP`` rows: past that, every row of the list would be read and sorted for a page
    of fifty (seconds at millions of rows, past the web's statement timeout). Such a list
    keeps its own order and the page says how to narrow it. The list's own order (either
    way) is always made; so are, on the list unfiltered, the orders ``index_orders`` on the
    model's admin names (read either way).

    A list that fits one page is read up to the rows counted: Django reads it without a
    limit, so that a filter matching few or none of the rows read every row its index held
    to find them again after the count had.

    The whole list in its own order is read as the model's admin bounds it
    (``newest_first(request, queryset, rows=COUNT_CAP)``, when it has one): the inbox's,
    from its newest partitions (docs/console.md, "The first pages of the whole inbox")."""

    def get_results(self, request):
        # The page's rows only: an action on the list selected whole takes every row
        # (Django's ``cl.get_queryset``).
        self.queryset = self._newest_first(request, self.queryset)
        super().get_results(request)
        if self.rows_all_shown():
            self.result_list = self.queryset[: self.result_count]
        complete = getattr(self.model_admin, "page_rows", None)
        if complete is not None:
            self.result_list = complete(request, list(self.result_list))

    def page_newest(self, field: str):
        """The newest ``field`` of the whole list, read from the page: its first row's
        when the page is the list's first and the list is sorted by ``field`` newest first
        (a column of the model's own without NULLs, loaded in the rows); else ``None``,
        unknown."""
        if self.page_num != 1 or LOOKUP_SEP in field:
            return None
        if getattr(self.lookup_opts.get_field(field), "null", True):
            return None
        names = _named(list(self.queryset.query.order_by), self._pk_names)
        if not names or names[0] != f"-{field}":
            return None
        rows = self.result_list
        if not rows or field in rows[0].get_deferred_fields():
            return None
        return getattr(rows[0], field)

    def rows_all_shown(self) -> bool:
        """Whether the page shows every row of the list, counted exactly (the date
        hierarchy then takes its dates from them, ``core.templatetags.admin_bounded``)."""
        return self.result_count <= COUNT_CAP and (
            not self.multi_page or (self.show_all and self.can_show_all)
        )

    def _index_ordered(self, request, ordering: list, *, filtered: bool) -> bool:
        """Whether an index gives ``ordering``: the list's own order (either way) always;
        another of ``index_orders`` only for the list unfiltered, since a filter's rows may
        lie anywhere along that index: the dead letters, all of one type, sorted by type
        walked every row of the types before it (1 s at a million rows)."""
        names = _named(ordering, self._pk_names)
        if not names:
            return names is not None
        own = self._own_order(request)
        orders = (
            [own] if filtered else [own, *getattr(self.model_admin, "index_orders", ())]
        )
        return any(names in (order, _reversed(order)) for order in orders if order)

    def _newest_first(self, request, queryset):
        """The whole list in its own order as its admin reads it (``newest_first``)."""
        newest = getattr(self.model_admin, "newest_first", None)
        if newest is None or queryset.query.where:
            return queryset
        names = _named(self.get_ordering(request, queryset.order_by()), self._pk_names)
        if names is None or names != self._own_order(request):
            return queryset
        return newest(request, queryset, rows=COUNT_CAP)

    @cached_property
    def _pk_names(self) -> set[str]:
        pk = self.lookup_opts.pk
        return {"pk", pk.name, pk.attname}

    def _own_order(self, request) -> tuple[str, ...] | None:
        """The list's own order as Django reads it (the admin's, else the model's)."""
        default = self.model_admin.get_ordering(request) or self.lookup_opts.ordering
        return _named(list(default or ()), self._pk_names)

    def get_queryset(self, request, exclude_parameters=None):
        # The sort is read before the search narrows the list (Django's order): the rows
        # are counted once both have.
        queryset = super().get_queryset(request, exclude_parameters)
        if not self.params.get(ORDER_VAR):
            return queryset
        ordering = self.get_ordering(request, queryset.order_by())
        if self._index_ordered(request, ordering, filtered=bool(queryset.query.where)):
            return queryset
        cap = COUNT_CAP
        if capped_count(queryset, cap=cap) <= cap:
            return queryset
        del self.params[ORDER_VAR]
        message_once(
            request,
            f"This list holds more than {cap} rows: it is sorted so once a filter, a "
            f"search or a date narrows it to {cap} rows or fewer. Until then it is shown "
            "in its own order.",
            level=messages.WARNING,
        )
        return queryset.order_by(*self.get_ordering(request, queryset.order_by()))


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
