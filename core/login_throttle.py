"""Admin login throttling beyond django-axes' per (username, address) lockout: progressive
lockouts of a username from any address, and of an address (an IPv6 /64) for any username
(docs/security.md, "Login throttled").

django-axes counts failures per parameter set and compares the largest with one limit; a
username alone would then lock after as few failures as a pair, which lets anyone lock a known
username out for the whole cool-off. So axes keeps its one set, ``[username, ip_address]``,
with ``AXES_FAILURE_LIMIT``, and this handler (``AXES_HANDLER``) adds the wide lockouts, read
from axes' own attempt rows: a username (or an address) with ``ADMIN_LOGIN_WIDE_FAILURE_LIMIT``
live failures is locked for ``ADMIN_LOGIN_WIDE_COOLOFF_SECONDS`` after its latest failure, the
lockout doubling with every further failure (one guess per lockout), up to
``AXES_COOLOFF_TIME``. Attempts refused during a lockout are not recorded
(``AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False``), so a lockout ends on time: a
guesser cannot keep a username locked by trying on."""

from __future__ import annotations

from datetime import datetime, timedelta

from axes.attempts import get_cool_off_threshold
from axes.conf import settings as axes_settings
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.utils import timezone


def wide_lockout_duration(failures: int) -> timedelta:
    """How long a username or an address with ``failures`` live failures is locked after its
    latest one: the first lockout is short, each further failure doubles it."""
    limit = settings.ADMIN_LOGIN_WIDE_FAILURE_LIMIT
    base = timedelta(seconds=settings.ADMIN_LOGIN_WIDE_COOLOFF_SECONDS)
    doublings = min(failures - limit, 32)
    longest = get_cool_off() or base
    return min(base * 2**doublings, longest)


def wide_lockout_ends_at(
    *, field: str, value: str | None, since: datetime
) -> datetime | None:
    """When the lockout of ``field`` (``username`` or ``ip_address``) = ``value`` ends, from
    the failures recorded since ``since``; None when it is not locked."""
    if value is None:
        return None
    found = AccessAttempt.objects.filter(
        **{field: value}, attempt_time__gte=since
    ).aggregate(failures=Sum("failures_since_start"), latest=Max("attempt_time"))
    failures = found["failures"] or 0
    if failures < settings.ADMIN_LOGIN_WIDE_FAILURE_LIMIT:
        return None
    return found["latest"] + wide_lockout_duration(failures)


class LoginThrottleHandler(AxesDatabaseHandler):
    """axes' database handler, with the wide lockouts of this module's docstring."""

    def is_locked(self, request, credentials: dict | None = None) -> bool:
        if super().is_locked(request, credentials):
            return True
        if not axes_settings.AXES_LOCK_OUT_AT_FAILURE:
            return False
        now = getattr(request, "axes_attempt_time", None) or timezone.now()
        since = get_cool_off_threshold(request)
        for field, value in (
            ("username", get_client_username(request, credentials)),
            ("ip_address", getattr(request, "axes_ip_address", None)),
        ):
            ends = wide_lockout_ends_at(field=field, value=value, since=since)
            if ends is not None and now < ends:
                return True
        return False
