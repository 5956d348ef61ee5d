from django.apps import apps
from django.contrib import admin
from django.db.models import BooleanField, ExpressionWrapper
from django.urls import reverse
from django.utils.html import format_html

from core.admin.filters import DateRangeFilter, StatusFilter
from core.admin.mixins import ReadOnlyAdminMixin
from core.admin.status import status_badge, status_words_register
from core.times import time_display

from .models import IdempotencyRecord
from .selectors import idempotency_stuck_q

# The model ("app_label.Model", with a unique ``public_id``) that an operation type's
# ``resource_id`` names, registered by the app that owns the operation (``deployments``
# registers its jobs): this app knows nothing of them (docs/architecture.md).
RESOURCE_MODELS: dict[str, str] = {}


def resource_model_register(*, operation_type: str, model: str) -> None:
    RESOURCE_MODELS[operation_type] = model


# The words and tone of a record's status, on every page of the console (docs/console.md,
# "One wording"): "stuck" is a record still processing past its lease.
status_words_register(
    {
        "processing": ("Processing", "running"),
        "succeeded": ("Succeeded", "ok"),
        "failed": ("Failed", "error"),
        "stuck": ("Processing (stuck)", "error"),
    }
)


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "status_display",
        "key",
        "operation_type",
        "client",
        "resource_id",
        "seen",
        "created",
    ]
    list_filter = [
        ("status", StatusFilter),
        "operation_type",
        ("created_at", DateRangeFilter),
    ]
    list_select_related = ["client"]
    list_display_links = ["key"]
    search_fields = ["=key", "=resource_id"]
    readonly_fields = (
        "status_display",
        "key",
        "operation_type",
        "client",
        "resource",
        "fingerprint",
        "fingerprint_fields",
        "request_hash",
        "response_status",
        "response_location",
        "replays",
        "conflicts",
        "created_at",
        "updated_at",
        "progress_deadline",
        "expires_at",
        "expired_at",
    )
    fields = readonly_fields

    @admin.display(description="status", ordering="status")
    def status_display(self, record):
        if record.is_stuck:
            return status_badge("stuck")
        return status_badge(record.status)

    @admin.display(description="created", ordering="created_at")
    def created(self, record):
        return time_display(record.created_at)

    @admin.display(description="resource", ordering="resource_id")
    def resource(self, record):
        """The deployment or build the key created, linked to its page."""
        name = RESOURCE_MODELS.get(record.operation_type)
        if not record.resource_id or name is None:
            return record.resource_id or "-"
        model = apps.get_model(name)
        pk = (
            model.objects.filter(public_id=record.resource_id)
            .values_list("pk", flat=True)
            .first()
        )
        if pk is None:
            return record.resource_id
        opts = model._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[pk])
        return format_html('<a href="{}">{}</a>', url, record.resource_id)

    @admin.display(description="replays / conflicts")
    def seen(self, record):
        return f"{record.replay_count} / {record.conflict_count}"

    @admin.display(description="replays")
    def replays(self, record):
        """Retries answered with the stored response."""
        if not record.replay_count:
            return "none"
        return f"{record.replay_count}, last at {time_display(record.last_replayed_at)}"

    @admin.display(description="conflicts (409)")
    def conflicts(self, record):
        """Requests with this key and another body, refused with 409."""
        if not record.conflict_count:
            return "none"
        return (
            f"{record.conflict_count}, last at {time_display(record.last_conflict_at)}"
        )

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
