from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import (
    sensitive_post_parameters,
    sensitive_variables,
)

from core.admin_base import ReadOnlyAdminMixin, ReasonForm, confirm_with_reason
from core.errors import ServiceError

from ..models import SignatureFailure, WebhookSource
from ..selectors import webhook_source_list
from ..services import (
    DEFAULT_GRACE_SECONDS,
    webhook_source_expected_interval_set,
    webhook_source_rotate,
)


class SecretRotationForm(ReasonForm):
    secret = forms.CharField(
        label="New secret",
        # Typed by the operator, never echoed back: the admin shows no secret, ever.
        widget=forms.PasswordInput(render_value=False),
        min_length=16,
        max_length=255,
        strip=False,
        help_text="Signs from now on. For standard-webhooks sources: whsec_<base64>.",
    )
    grace_seconds = forms.IntegerField(
        label="Grace period (seconds)",
        min_value=0,
        initial=DEFAULT_GRACE_SECONDS,
        help_text="How long the current secrets stay valid.",
    )


@admin.register(WebhookSource)
class WebhookSourceAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    # The secrets are never listed, counted only.
    list_display = (
        "slug",
        "scheme",
        "handler",
        "is_enabled",
        "expected_delivery_interval_seconds",
        "secret_count",
        "created_at",
    )
    list_filter = ("scheme", "handler", "is_enabled")
    search_fields = ("slug",)
    ordering = ("slug",)
    fields = (
        "slug",
        "scheme",
        "handler",
        "timestamp_tolerance_seconds",
        "is_enabled",
        "expected_delivery_interval_seconds",
        "secret_count",
        "created_at",
        "updated_at",
    )
    # The expected delivery interval (what the "no delivery" alert compares with, see
    # docs/runbook.md) is the one field an operator edits here; the rest changes through
    # manage.py webhook_source and the actions.
    readonly_fields = tuple(
        name for name in fields if name != "expected_delivery_interval_seconds"
    )
    actions = ["rotate_secret"]

    def get_queryset(self, request):
        return webhook_source_list()

    def has_change_permission(self, request, obj=None):
        return request.user.has_perm("webhooks.change_webhooksource")

    def save_model(self, request, obj, form, change):
        webhook_source_expected_interval_set(
            source=obj,
            seconds=form.cleaned_data["expected_delivery_interval_seconds"],
        )

    @admin.display(description="secrets", ordering="secret_count")
    def secret_count(self, obj):
        return obj.secret_count

    def has_rotate_secret_permission(self, request):
        return request.user.has_perm("webhooks.rotate_secret")

    @admin.action(description="Rotate secret", permissions=["rotate_secret"])
    @sensitive_variables("data")
    def rotate_secret(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(
                request, "Select exactly one source to rotate.", messages.WARNING
            )
            return None
        source = queryset.get()
        data = confirm_with_reason(
            self,
            request,
            queryset,
            action="rotate_secret",
            title=f"Rotate the secret of {source.slug}",
            intro=(
                "The new secret signs from now on; the current ones stay valid for the grace "
                "period. It is stored for verification and never shown again here."
            ),
            submit_label="Rotate",
            form_class=SecretRotationForm,
        )
        if isinstance(data, HttpResponse):
            return data
        try:
            webhook_source_rotate(
                source=source,
                secret=data["secret"],
                grace_seconds=data["grace_seconds"],
                actor=request.user,
                reason=data["reason"],
            )
        except ServiceError as exc:
            self.message_user(request, f"Not rotated: {exc}", messages.ERROR)
            return None
        self.message_user(
            request,
            f"Rotated the secret of {source.slug}; the previous ones expire in "
            f"{data['grace_seconds']} s.",
            messages.SUCCESS,
        )
        return None

    @method_decorator(sensitive_post_parameters("secret"))
    def changelist_view(self, request, extra_context=None):
        # Actions post to the changelist: the rotation form's secret never reaches an
        # error report or a debug page.
        return super().changelist_view(request, extra_context)


@admin.register(SignatureFailure)
class SignatureFailureAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("source", "reason", "window_start", "count", "last_remote_addr")
    list_filter = ("reason", "source")
    list_select_related = ("source",)
    ordering = ("-window_start", "-id")
    date_hierarchy = "window_start"
