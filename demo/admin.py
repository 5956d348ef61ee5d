"""The demo's dependencies in the console: their state, who switched them last, and the two
actions a rehearsal uses (operators only; each switch an operator action). Registered only
where the ``demo`` integration is (the local and test settings)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.utils.html import format_html

from core.actors import Actor
from core.admin.actions import confirm_with_reason
from core.admin.mixins import ReadOnlyAdminMixin
from core.errors import ServiceError
from core.times import time_display

from .models import DemoDependency
from .services import demo_dependency_switch


class DemoDependencyAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("state", "name", "description", "changed", "changed_by_name")
    list_display_links = ("name",)
    ordering = ("name",)
    actions = ("switch_down", "switch_up")
    fields = ("name", "description", "state", "changed", "changed_by_name")
    readonly_fields = fields

    def has_switch_dependency_permission(self, request) -> bool:
        return request.user.has_perm("demo.switch_dependency")

    @admin.display(description="state")
    def state(self, obj: DemoDependency) -> str:
        # The badges' colours (docs/console.md, "One wording"): up is green, down red.
        return format_html(
            '<span class="badge badge-{}" data-status="{}">{}</span>',
            "ok" if obj.is_up else "error",
            "up" if obj.is_up else "down",
            "Up" if obj.is_up else "Down",
        )

    @admin.display(description="changed")
    def changed(self, obj: DemoDependency) -> str:
        return time_display(obj.changed_at) if obj.changed_at else "-"

    def _switch(self, request, queryset, *, up: bool):
        if not self.has_switch_dependency_permission(request):
            raise PermissionDenied
        word = "up" if up else "down"
        reason = confirm_with_reason(
            self,
            request,
            queryset,
            action=f"switch_{word}",
            title=f"Switch demo dependencies {word}",
            intro=(
                "The demo integration's events are processed again; replay the ones that "
                "were dead-lettered meanwhile."
                if up
                else "The demo integration's events fail while it is down: they retry, "
                "then are dead-lettered once their attempts are exhausted."
            ),
            submit_label=f"Switch {word}",
        )
        if isinstance(reason, HttpResponse):
            return reason
        for dependency in queryset.order_by("name"):
            try:
                demo_dependency_switch(
                    name=dependency.name,
                    up=up,
                    actor=Actor.of(request.user),
                    reason=reason,
                )
            except ServiceError as exc:
                self.message_user(request, f"Not switched: {exc}.", messages.WARNING)
                continue
            self.message_user(
                request, f"Switched {dependency.name} {word}.", messages.SUCCESS
            )
        return None

    @admin.action(
        description="Switch selected dependencies down",
        permissions=["switch_dependency"],
    )
    def switch_down(self, request, queryset):
        return self._switch(request, queryset, up=False)

    @admin.action(
        description="Switch selected dependencies back up",
        permissions=["switch_dependency"],
    )
    def switch_up(self, request, queryset):
        return self._switch(request, queryset, up=True)


if "demo" in settings.WEBHOOK_INTEGRATIONS:
    admin.site.register(DemoDependency, DemoDependencyAdmin)
