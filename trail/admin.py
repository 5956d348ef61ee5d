"""Core's API clients in the console: only ``is_active`` and ``role`` change, through the
services that record them (``trail.api_clients``), so the admin sits with those services."""

from django.contrib import admin

from core.actors import Actor
from core.models import ApiClient

from .api_clients import api_client_set_active, api_client_set_role


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    list_display = ("name", "role", "token_prefix", "is_active", "created_at")
    list_filter = ("is_active", "role")
    search_fields = ("name",)
    # The token is shown once by `api_client create`; here only its hash exists, never shown.
    fields = ("name", "token_prefix", "role", "is_active", "created_at", "updated_at")
    readonly_fields = ("name", "token_prefix", "created_at", "updated_at")

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        # Only ``is_active`` and ``role`` are editable: each change is the service's,
        # recorded as an operator action.
        if "role" in form.changed_data:
            api_client_set_role(
                client=obj, role=form.cleaned_data["role"], actor=Actor.of(request.user)
            )
        if "is_active" in form.changed_data:
            api_client_set_active(
                client=obj,
                active=form.cleaned_data["is_active"],
                actor=Actor.of(request.user),
            )

    def log_change(self, request, obj, message):
        pass  # the operator action is the record
