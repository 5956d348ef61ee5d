from django.contrib import admin

from .models import ApiClient, WorkerHeartbeat


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


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ("hostname", "created_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
