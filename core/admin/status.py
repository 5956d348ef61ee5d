"""One wording and one colour per status, on every page that shows one (docs/console.md,
"One wording"): the words of each status, registered by the app that stores it, shown as a
badge or as words, and the display that shows a model's status field as its badge.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.contrib import admin
from django.core.exceptions import ImproperlyConfigured
from django.utils.html import format_html

# Every status registered (``status_words_register``): its words and its tone, which names
# the badge's colour in core/static/core/admin.css.
STATUS_WORDS: dict[str, tuple[str, str]] = {}


def status_words_register(words: Mapping[str, tuple[str, str]]) -> None:
    """Adds an app's statuses (an inbox event's, a job's, an attempt's outcome...) with their
    words and tone, from the app's admin. A status that several apps store (``failed``) has
    one wording on every page: registered again, it must come with the same words and tone."""
    for status, shown in words.items():
        if STATUS_WORDS.setdefault(status, shown) != shown:
            raise ImproperlyConfigured(
                f"status {status!r} is shown as {STATUS_WORDS[status]!r} already, "
                f"not {shown!r}: one wording per status"
            )


def status_words(status: str) -> str:
    """The words the console shows for ``status``."""
    return STATUS_WORDS.get(status, (status.replace("_", " ").capitalize(), ""))[0]


def status_badge(status: str, detail: str = "") -> str:
    """``status`` as a badge, in its one wording and colour, ``detail`` after the words
    (``Paused since … by …``). Escaped."""
    words, tone = STATUS_WORDS.get(
        status, (status.replace("_", " ").capitalize(), "neutral")
    )
    return format_html(
        '<span class="badge badge-{}" data-status="{}">{}{}</span>',
        tone or "neutral",
        status,
        words,
        f" {detail}" if detail else "",
    )


def status_field_badge(field_name: str, *, description: str = ""):
    """An admin display that shows the model field ``field_name`` (a status, an outcome) as
    its badge, for a list's column or a record's page: ``outcome_badge =
    status_field_badge("outcome")`` on the admin, ``"outcome_badge"`` in its fields."""

    @admin.display(
        description=description or field_name.replace("_", " "), ordering=field_name
    )
    def shown(self, obj) -> str:
        value = getattr(obj, field_name)
        return status_badge(value) if value else "-"

    return shown
