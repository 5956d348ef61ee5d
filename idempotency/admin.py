from django.contrib import admin
from django.db.models import BooleanField, ExpressionWrapper

from core.admin_base import DateRangeFilter, ReadOnlyAdminMixin, status_badge

from .models import IdempotencyRecord
from .selectors import idempotency_stuck_q


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "status_display",
        "key",
        "operation_type",
        "client",
        "resource_id",
        "created_at",
        "expires_at",
        "expired_at",
    ]
    list_filter = ["status", "operation_type", ("created_at", DateRangeFilter)]
    list_select_related = ["client"]
    list_display_links = ["key"]
    search_fields = ["=key", "=resource_id"]
    exclude = ["response_body"]

    @admin.display(description="status", ordering="status")
    def status_display(self, record):
        if record.is_stuck:
            return status_badge("stuck")
        return status_badge(record.status)

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .defer("response_body")
            .annotate(
                is_stuck=ExpressionWrapper(
                    idempotency_stuck_q(), output_field=BooleanField()
                )
            )
        )
