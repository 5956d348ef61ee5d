"""The admin's date hierarchy without ``SELECT DISTINCT date_trunc(...)`` over the whole table:
the periods offered are the ones between the first and the last row (two index lookups), or
within the period the list's queryset knows its rows lie in (``core.models.BoundedQuerySet``),
read from no row at all, or those of the rows the page shows when it shows every row."""

import calendar
import datetime

from django import template
from django.contrib.admin.templatetags.admin_list import date_hierarchy
from django.contrib.admin.utils import get_fields_from_path
from django.utils import formats, timezone
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from core.admin.pagination import LongListChangeList
from core.models import BoundedQuerySet

register = template.Library()


def _shown_range(cl):
    """The first and last time of the rows the page shows, when it shows every row of the
    list and holds the times (``core.admin.pagination.LongListChangeList``); else ``None``."""
    if not (isinstance(cl, LongListChangeList) and cl.rows_all_shown()):
        return None
    rows = list(cl.result_list)
    if any(cl.date_hierarchy in row.get_deferred_fields() for row in rows):
        return None
    times = [t for t in (getattr(row, cl.date_hierarchy) for row in rows) if t]
    return (min(times), max(times)) if times else (None, None)


def _ends(cl):
    """The list's first and last time, each read as the one row first in that order, the
    last taken from the page instead when it tells it (``LongListChangeList.page_newest``):
    one statement or two, each planned once, where MIN and MAX in one statement are planned
    three times, each time over every partition of a partitioned table (docs/scaling.md,
    "At a year of daily partitions")."""
    field = cl.date_hierarchy
    times = cl.queryset.order_by().values_list(field, flat=True)
    if get_fields_from_path(cl.model, field)[-1].null:
        times = times.filter(**{f"{field}__isnull": False})
    last = cl.page_newest(field) if isinstance(cl, LongListChangeList) else None
    if last is None:
        last = times.order_by(f"-{field}").first()
    if last is None:
        return None, None
    return times.order_by(field).first(), last


def _range(cl):
    period = (
        cl.queryset.known_period(cl.date_hierarchy)
        if isinstance(cl.queryset, BoundedQuerySet)
        else None
    )
    if period is None:
        period = _shown_range(cl)
    if period is not None:
        first, last = period
    else:
        first, last = _ends(cl)
    if first is None or last is None:
        return None, None
    if timezone.is_aware(first):
        first, last = timezone.localtime(first), timezone.localtime(last)
    return first, last


@register.inclusion_tag("admin/date_hierarchy.html")
def bounded_date_hierarchy(cl):
    field_name = cl.date_hierarchy
    year_field, month_field, day_field = (
        f"{field_name}__year",
        f"{field_name}__month",
        f"{field_name}__day",
    )
    year_lookup = cl.params.get(year_field)
    month_lookup = cl.params.get(month_field)
    day_lookup = cl.params.get(day_field)
    if year_lookup and month_lookup and day_lookup:
        return date_hierarchy(cl)  # no query at the day level

    def link(filters):
        return cl.get_query_string(filters, [f"{field_name}__"])

    first, last = _range(cl)
    if first is None:
        return {"show": True, "back": None, "choices": []}
    if not (year_lookup or month_lookup) and first.year == last.year:
        year_lookup = first.year
        if first.month == last.month:
            month_lookup = first.month
    if year_lookup and month_lookup:
        year, month = int(year_lookup), int(month_lookup)
        days_in_month = calendar.monthrange(year, month)[1]
        lo = first.day if (first.year, first.month) == (year, month) else 1
        hi = last.day if (last.year, last.month) == (year, month) else days_in_month
        return {
            "show": True,
            "back": {
                "link": link({year_field: year_lookup}),
                "title": str(year_lookup),
            },
            "choices": [
                {
                    "link": link(
                        {
                            year_field: year_lookup,
                            month_field: month_lookup,
                            day_field: d,
                        }
                    ),
                    "title": capfirst(
                        formats.date_format(
                            datetime.date(year, month, d), "MONTH_DAY_FORMAT"
                        )
                    ),
                }
                for d in range(lo, hi + 1)
            ],
        }
    if year_lookup:
        year = int(year_lookup)
        lo = first.month if first.year == year else 1
        hi = last.month if last.year == year else 12
        return {
            "show": True,
            "back": {"link": link({}), "title": _("All dates")},
            "choices": [
                {
                    "link": link({year_field: year_lookup, month_field: m}),
                    "title": capfirst(
                        formats.date_format(
                            datetime.date(year, m, 1), "YEAR_MONTH_FORMAT"
                        )
                    ),
                }
                for m in range(lo, hi + 1)
            ],
        }
    return {
        "show": True,
        "back": None,
        "choices": [
            {"link": link({year_field: str(y)}), "title": str(y)}
            for y in range(first.year, last.year + 1)
        ],
    }
