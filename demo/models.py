from __future__ import annotations

from django.conf import settings
from django.db import models


class DemoDependency(models.Model):
    """Something the demo integration's events need, which an operator switches down (to
    rehearse a failure) and back up (``demo.services.demo_dependency_switch``, each switch an
    operator action). A name without a row is up."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=255, blank=True, default="")
    is_up = models.BooleanField(default=True)
    changed_at = models.DateTimeField(null=True, blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    changed_by_name = models.CharField(
        "changed by", max_length=255, blank=True, default=""
    )

    class Meta:
        verbose_name = "demo dependency"
        verbose_name_plural = "demo dependencies"
        permissions = [
            ("switch_dependency", "Can switch a demo dependency down and back up")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({'up' if self.is_up else 'down'})"
