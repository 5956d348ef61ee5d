"""The console's ways of showing a time, a duration and a status, for templates: the same
helpers the admins' columns use (``core.admin``)."""

import html
import re

from django import template
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from core.admin.status import status_badge, status_words
from core.times import duration_display, time_display

register = template.Library()

register.filter("time_shown", time_display)
register.filter("duration_shown", duration_display)
register.filter("status_badge", status_badge)
register.filter("status_words", status_words)

# A token this long gets break opportunities at its separators; a cell with a token that may
# not fit its column (this long, with a letter: not a date or a time) gets its whole text as
# a tooltip, for the part of it a narrow column still cuts.
TOKEN_MIN = 8
TITLE_TOKEN_MIN = 12
_TOKEN = re.compile(rf"[^\s<>]{{{TOKEN_MIN},}}")
_TITLE_TOKEN = re.compile(rf"(?=[^\s]*[A-Za-z_])[^\s]{{{TITLE_TOKEN_MIN},}}")
# After an underscore or a slash anywhere, after a dot, a colon or an at sign before a letter
# ("research.document.updated", "acme/shop", "evt_doc42_7"; never "0.320" or "15:41:02").
_SEPARATOR = re.compile(r"([_/]|[.:@](?=[A-Za-z]))(?=\S)")
_TAG = re.compile(r"(<[^>]*>)")
_CELL = re.compile(r"^<(td|th)\b(?![^>]*\btitle=)")


@register.filter
def wrap_tokens(value: str) -> SafeString:
    """A list's cell (already escaped HTML) whose long tokens (ids, dotted types, paths)
    wrap only at their separators (``<wbr>``), never inside a word, with the cell's whole
    text as its tooltip when it holds a token its column may still cut (docs/console.md,
    "Lists"). Only the text between tags is touched."""
    parts = _TAG.split(str(value))
    text = html.unescape(" ".join(parts[0::2]))
    for i in range(0, len(parts), 2):
        parts[i] = _TOKEN.sub(
            lambda match: _SEPARATOR.sub(r"\1<wbr>", match.group(0)), parts[i]
        )
    if len(parts) > 1 and not parts[0] and _TITLE_TOKEN.search(text):
        title = escape(" ".join(text.split()))
        parts[1] = _CELL.sub(rf'<\1 title="{title}"', parts[1], count=1)
    return mark_safe("".join(parts))  # noqa: S308 - escaped text, tags as given


@register.simple_tag
def admin_history_exists(obj) -> bool:
    """Whether the admin recorded changes of ``obj`` (its "History" page has rows)."""
    if obj is None or obj.pk is None:
        return False
    return LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(obj, for_concrete_model=False),
        object_id=str(obj.pk),
    ).exists()
