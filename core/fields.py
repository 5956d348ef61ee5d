"""API input fields the apps share."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rest_framework import serializers

from .times import INSTANT_RANGE_MESSAGE, instant_in_range


class InstantField(serializers.DateTimeField):
    """DRF's ``DateTimeField`` (ISO 8601; without an offset, a time in ``TIME_ZONE``) for an
    instant the product stores or compares with stored ones: within
    ``core.times.EARLIEST_INSTANT``..``LATEST_INSTANT``, so that it can be read back in any
    zone, else the field's error (422 ``invalid_payload``). DRF's own conversion of a time
    at the ends of the calendar (``0001-01-01`` in a zone east of UTC) raised
    ``OverflowError``: a 500 (docs/security.md, "Values the database refuses")."""

    default_error_messages = {"range": INSTANT_RANGE_MESSAGE}

    def enforce_timezone(self, value: datetime) -> datetime:
        try:
            return super().enforce_timezone(value)
        except OverflowError:
            self.fail("range")

    def to_internal_value(self, value: Any) -> datetime:
        instant = super().to_internal_value(value)
        if not instant_in_range(instant):
            self.fail("range")
        return instant
