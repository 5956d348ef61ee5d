"""The console's ways of showing a time, a duration and a status, for templates: the same
helpers the admins' columns use (``core.admin_base``)."""

from django import template
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType

from core.admin_base import status_badge, status_words
from core.times import duration_display, time_display

register = template.Library()

register.filter("time_shown", time_display)
register.filter("duration_shown", duration_display)
register.filter("status_badge", status_badge)
register.filter("status_words", status_words)


@register.simple_tag
def admin_history_exists(obj) -> bool:
    """Whether the admin recorded changes of ``obj`` (its "History" page has rows)."""
    if obj is None or obj.pk is None:
        return False
    return LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(obj, for_concrete_model=False),
        object_id=str(obj.pk),
    ).exists()
