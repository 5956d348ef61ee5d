"""The console's list filters: a status column's (in the badges' words), a range of days,
and the date hierarchy at the ends of the calendar, with the error a filter the list cannot
use shows on its page (docs/security.md, "Values the database refuses").
"""

from __future__ import annotations

import contextlib
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, cast

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest
from django.utils import timezone

from ..models import Constant
from .status import status_words


def choice_filter(queryset, lookup: str, value: str, choices: set[str]):
    """``queryset`` filtered on ``lookup`` equal to ``value``: written into the statements
    (``core.models.Constant``) when ``value`` is one of the filter's ``choices`` and a word a
    statement may hold, so that they are prepared, one plan per choice (core/plans.py);
    else sent as a value, as Django sends it."""
    if value in choices:
        with contextlib.suppress(ValueError):
            return queryset.filter(**{lookup: Constant(value)})
    return queryset.filter(**{lookup: value})


class StatusFilter(admin.ChoicesFieldListFilter):
    """A status column's filter, its choices in the badges' words (``STATUS_WORDS``), not
    the model's labels: ``("processing_status", StatusFilter)`` in ``list_filter``."""

    def queryset(self, request, queryset):
        """A status among the column's choices written into the statements (``Constant``):
        they are then prepared, one plan per status (core/plans.py); anything else is
        filtered on as Django does."""
        if list(self.used_parameters) == [self.lookup_kwarg]:
            # A list of the values given (Django's ``prepare_lookup_value``).
            values = cast(list[str], self.used_parameters[self.lookup_kwarg])
            if len(values) == 1:
                known = {str(v) for v, _ in self.field.flatchoices if v is not None}
                return choice_filter(queryset, self.lookup_kwarg, values[0], known)
        return super().queryset(request, queryset)

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


def message_once(request: HttpRequest, text: str, level: int = messages.ERROR) -> None:
    """A message on the page (an error unless ``level`` says otherwise), once however often
    the list builds its filters (it builds them again for each filter's counts)."""
    shown = request.__dict__.setdefault("_console_errors_shown", set())
    if text not in shown:
        shown.add(text)
        messages.add_message(request, level, text)


class CalendarEndsChangeList(ChangeList):
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
