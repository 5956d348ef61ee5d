"""Pages that stay cheap on big tables: a changelist's count that stops at ``COUNT_CAP`` and
an inline shown a page at a time (docs/console.md).
"""

from __future__ import annotations

from typing import cast

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.forms.models import BaseInlineFormSet
from django.utils.functional import cached_property

from ..selectors import COUNT_CAP, capped_count


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
