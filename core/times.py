"""How the console writes an instant: one format everywhere, to the second, with the zone
(``2026-12-01 15:41:02 UTC``), so that rows of different pages can be put in order by eye.
The zone is ``TIME_ZONE`` (docs/console.md, "Times")."""

from __future__ import annotations

from datetime import UTC, datetime

from django.utils import timezone

TIME_FORMAT = "%Y-%m-%d %H:%M:%S %Z"

# The instants a stored date may hold: every one of them can be read back in any time zone
# (Python's dates end at years 1 and 9999, a day's margin each side). A date outside is
# refused where it comes in (ingest, the API, the console's forms: 422 or a form error)
# rather than stored and then unreadable (docs/security.md, "Values the database refuses").
EARLIEST_INSTANT = datetime(1, 1, 2, tzinfo=UTC)
LATEST_INSTANT = datetime(9999, 12, 31, tzinfo=UTC)
# isoformat, not strftime: "%Y" writes year 1 as "1" on some platforms.
INSTANT_RANGE_MESSAGE = (
    f"Must lie between {EARLIEST_INSTANT.date().isoformat()} and "
    f"{LATEST_INSTANT.date().isoformat()} (UTC)."
)


def instant_in_range(value: datetime) -> bool:
    """Whether the aware ``value`` lies within ``EARLIEST_INSTANT``..``LATEST_INSTANT``
    (the latter excluded)."""
    return EARLIEST_INSTANT <= value < LATEST_INSTANT


def time_display(value: datetime | None, *, empty: str = "-") -> str:
    """``value`` in ``TIME_ZONE``, to the second, with the zone's name; ``empty`` for none.
    A naive value (none is stored with ``USE_TZ``) is shown as it is, without a zone."""
    if value is None:
        return empty
    if timezone.is_aware(value):
        return timezone.localtime(value).strftime(TIME_FORMAT)
    return value.strftime("%Y-%m-%d %H:%M:%S")


def duration_display(seconds: float | None, *, empty: str = "-") -> str:
    """A duration with its unit: ``0.312 s``, ``3 min 12 s``, ``2 h 10 min``, ``334 d 2 h``
    (negative when a producer's clock runs ahead); ``empty`` for none."""
    if seconds is None:
        return empty
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.3f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{sign}{days} d {hours} h"
    if hours:
        return f"{sign}{hours} h {minutes} min"
    return f"{sign}{minutes} min {secs} s"
