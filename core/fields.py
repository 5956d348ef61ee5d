"""The fields every API body is read with (docs/http-api.md, "Strings"): a member is a JSON
string, taken as sent.

DRF's ``CharField`` turns a number into its text (``"environment": 0`` made a deployment in
environment ``"0"``) and trims whitespace before its validators run, so that neither what a
rule checked nor what the OpenAPI schema said was what the client sent. Here:

- anything but a string (a number, a boolean, a list, an object) is ``Not a valid string.``,
  and null is refused as DRF refuses it: 422 ``invalid_payload`` naming the member;
- the string is kept as sent: no whitespace is trimmed, so a rule holds for the very text;
- a required member may not be empty (``minLength: 1`` in the schema), an optional one may;
- ``pattern`` is matched against the whole string and published in the schema; every string
  has one, since PostgreSQL's text cannot hold a NUL character (the default pattern says only
  that)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.core.validators import ProhibitNullCharactersValidator, RegexValidator
from django.utils import timezone
from rest_framework import serializers

from .times import INSTANT_RANGE_MESSAGE, instant_in_range

if TYPE_CHECKING:
    from django_stubs_ext import StrPromise

# Any text without a NUL character, written so that Python's ``re`` and ECMA-262 (the
# schema's patterns) read it alike.
NO_NUL_PATTERN = r"[^\u0000]*"


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "Not a valid string."}

    def __init__(
        self,
        *,
        pattern: str = NO_NUL_PATTERN,
        pattern_message: str | StrPromise = "Not in the expected form.",
        allow_blank: bool = False,
        **kwargs,
    ) -> None:
        kwargs.setdefault("trim_whitespace", False)
        # An empty string is this field's to allow (``run_validation``), not DRF's: given
        # ``allow_blank``, drf-spectacular writes a patterned field as ``oneOf`` it and the
        # empty string, which the empty string then matches twice (the pattern allows it).
        self.blank_allowed = allow_blank
        if not allow_blank and kwargs.get("min_length") is None:
            kwargs["min_length"] = 1
        super().__init__(**kwargs)
        if pattern == NO_NUL_PATTERN:
            pattern_message = ProhibitNullCharactersValidator.message
        # The pattern says it: one message for a NUL, not two.
        self.validators = [
            validator
            for validator in self.validators
            if not isinstance(validator, ProhibitNullCharactersValidator)
        ]
        # Anchored as a whole (``\A``, ``\Z``: ``$`` would let a trailing newline through);
        # drf-spectacular writes them as ECMA's ``^`` and ``$``.
        self.validators.append(
            RegexValidator(re.compile(rf"\A(?:{pattern})\Z"), message=pattern_message)
        )

    def run_validation(self, data=serializers.empty):
        if data == "" and self.blank_allowed:
            return ""
        return super().run_validation(data)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class LowercaseCharField(StrictCharField):
    """Validated as sent, then lower-cased: a rule holds for what the client wrote (the
    Kelvin sign is not ASCII, though it lower-cases to ``k``)."""

    def run_validation(self, data=serializers.empty):
        value = super().run_validation(data)
        return value.lower() if isinstance(value, str) else value


class StrictChoiceField(serializers.ChoiceField):
    """One of the choices, as a JSON string (DRF's compares ``str()`` of any value)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


class InstantBoundField(serializers.DateTimeField):
    """A date-time that bounds a filter (``updated_since``). An instant whose UTC reading
    falls outside Python's years 1 to 9999 (``0001-01-01T00:00:00+01:00``,
    ``9999-12-31T23:00:00-02:00``: valid RFC 3339), or a time without an offset that
    ``TIME_ZONE`` carries past them, is read as the first or the last instant Python holds,
    which every stored instant compares with alike; DRF answered the first 422 "Datetime
    value out of range" and the second with an ``OverflowError`` (a 500)."""

    def enforce_timezone(self, value):
        # A naive one is read in ``TIME_ZONE`` first, which overflows as well at the ends
        # of the calendar (``0001-01-01`` east of UTC).
        try:
            aware = (
                value if timezone.is_aware(value) else super().enforce_timezone(value)
            )
            return aware.astimezone(UTC)
        except OverflowError:
            edge = datetime.max if value.year > 1 else datetime.min
            return edge.replace(tzinfo=UTC)


class BooleanTextField(StrictChoiceField):
    """A boolean query parameter as the schema's ``boolean`` is written: ``true`` or
    ``false``, nothing else (DRF's ``BooleanField`` also read ``1``, ``yes``, ``on``, and an
    empty value or ``null`` as not given)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(choices=["true", "false"], **kwargs)

    def to_internal_value(self, data):
        return super().to_internal_value(data) == "true"


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
