"""How a record's page shows what it holds: its fields, a long text's head, a link to another
record, and stored payloads and bodies as JSON, read-only and escaped (docs/console.md).
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models.functions import Left, Length
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html


def fieldset_fields(fieldsets: Any) -> tuple[str, ...]:
    """The names of the fields that ``fieldsets`` shows, in order (a detail page whose every
    field is read-only declares them once, as its fieldsets)."""
    names: list[str] = []
    for _, options in fieldsets:
        for entry in options["fields"]:
            names.extend([entry] if isinstance(entry, str) else entry)
    return tuple(names)


# How much of a long text field (a job's detail, say) a page shows: the database sends the
# page this much of it, and its length.
TEXT_SHOWN_MAX = 1000


def text_head_annotate(queryset, *, field: str):
    """``queryset`` without ``field``'s text, with its first ``TEXT_SHOWN_MAX`` + 1
    characters as ``<field>_head`` and its length as ``<field>_length``."""
    return queryset.defer(field).annotate(
        **{
            f"{field}_head": Left(field, TEXT_SHOWN_MAX + 1),
            f"{field}_length": Length(field),
        }
    )


def text_head(obj, *, field: str) -> str:
    """What ``text_head_annotate`` kept of ``field``, with a note of its full length when
    it was cut. Escaped."""
    head, length = getattr(obj, f"{field}_head"), getattr(obj, f"{field}_length")
    if length is None or length <= TEXT_SHOWN_MAX:
        return head or ""
    return format_html(
        "{}&hellip; <em>({} characters; the first {} are shown)</em>",
        head[:TEXT_SHOWN_MAX],
        str(length),
        str(TEXT_SHOWN_MAX),
    )


def admin_link(obj, text: str | None = None) -> str:
    """A link to the object's admin page, or its text when it has none."""
    try:
        url = reverse(
            f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk]
        )
    except NoReverseMatch:
        return str(text or obj)
    return format_html('<a href="{}">{}</a>', url, text or obj)


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON; a structure too deep to indent stays on one line."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except RecursionError:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)


def pretty_body(raw: bytes | memoryview | None) -> str:
    """A stored body as indented JSON when it parses, else as (replaced) text. Whatever was
    stored renders: nothing here may fail on a body that ingest accepted. Not yet escaped."""
    if raw is None:
        return ""
    data = bytes(raw)
    try:
        return pretty_json(json.loads(data))
    except (ValueError, RecursionError):
        return data.decode("utf-8", errors="replace")


def json_block(value: Any):
    """A JSON value in a ``<pre>`` block, escaped: shown as recorded (``as-recorded``: its
    codes and numbers are the record's, not the console's words)."""
    return format_html('<pre class="as-recorded">{}</pre>', pretty_json(value or {}))
