"""The audit console's building blocks for every app's admin, and core's own admins (the API
clients, the worker heartbeats), which Django's autodiscovery finds here as ``core.admin``.

- ``status``: one wording and one badge per status, each app registering its own words;
- ``filters``: a status column's filter, a range of days, the calendar's ends;
- ``pagination``: counts that stay bounded on big tables, inlines a page at a time;
- ``mixins``: read-only ledgers, status fields as badges, paged inlines;
- ``render``: stored payloads, long texts and links on a record's page;
- ``actions``: the confirmation page of an action that needs a reason;
- ``diff``: two bodies side by side, bounded;
- ``evidence``: a row's entry in the verifiable log and a record's evidence bundle.

See docs/console.md, "How it shows things".
"""

from django.contrib import admin

from ..actors import Actor
from ..models import ApiClient, WorkerHeartbeat
from ..services import api_client_set_active


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    list_display = ("name", "token_prefix", "is_active", "created_at")
    list_filter = ("is_active",)
    search_fields = ("name",)
    # The token is shown once by `api_client create`; here only its hash exists, never shown.
    fields = ("name", "token_prefix", "is_active", "created_at", "updated_at")
    readonly_fields = ("name", "token_prefix", "created_at", "updated_at")

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        # Only ``is_active`` is editable: its change is the service's, recorded as an
        # operator action.
        if "is_active" in form.changed_data:
            api_client_set_active(
                client=obj,
                active=form.cleaned_data["is_active"],
                actor=Actor.of(request.user),
            )

    def log_change(self, request, obj, message):
        pass  # the operator action is the record


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ("hostname", "created_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
