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

from django.core.validators import ProhibitNullCharactersValidator, RegexValidator
from rest_framework import serializers

# Any text without a NUL character. In the schema as an ECMA-262 pattern, ``[^\u0000]``.
NO_NUL_PATTERN = "[^\x00]*"


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "Not a valid string."}

    def __init__(
        self,
        *,
        pattern: str = NO_NUL_PATTERN,
        pattern_message: str = "Not in the expected form.",
        **kwargs,
    ) -> None:
        kwargs.setdefault("trim_whitespace", False)
        if not kwargs.get("allow_blank") and kwargs.get("min_length") is None:
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
