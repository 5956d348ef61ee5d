"""Building blocks of the audit console's admins: read-only ledgers, counts that stay bounded on
big tables, and the confirmation page of actions that need a reason."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.core.paginator import Paginator
from django.template.response import TemplateResponse
from django.utils.functional import cached_property

from .selectors import COUNT_CAP, capped_count


class BoundedCountPaginator(Paginator):
    """Counts at most ``COUNT_CAP + 1`` rows: a changelist page never runs a full ``COUNT(*)``.
    Past the cap, narrow the list with a filter or the date hierarchy."""

    @cached_property
    def cap(self) -> int:
        return COUNT_CAP

    @cached_property
    def count(self) -> int:
        return capped_count(self.object_list, cap=self.cap)

    @property
    def is_capped(self) -> bool:
        return self.count > self.cap


class ReadOnlyAdminMixin:
    """Ledgers are browsable, never added, changed or deleted through the admin."""

    show_full_result_count = False
    paginator = BoundedCountPaginator
    change_list_template = "admin/webhooks/bounded_change_list.html"

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInlineMixin:
    """An inline of a ledger: shown on its parent's page, never edited there."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=2000,
        help_text="Recorded with the operator action; auditors read it.",
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
        initial=86400,
        help_text="How long the current secrets stay valid.",
    )


def confirm_with_reason(
    modeladmin: admin.ModelAdmin,
    request,
    queryset,
    *,
    action: str,
    title: str,
    intro: str,
    submit_label: str,
    label: str = "Reason",
    form_class: type[ReasonForm] = ReasonForm,
):
    """First call: the confirmation page asking for a reason (returns a response). Second call
    (the page posted back with ``post``): returns the cleaned reason (the whole cleaned data
    with another ``form_class``), or the page again with errors."""
    form = form_class(request.POST if request.POST.get("post") else None)
    form.fields["reason"].label = label
    if request.POST.get("post") and form.is_valid():
        if form_class is ReasonForm:
            return form.cleaned_data["reason"]
        return form.cleaned_data
    selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
    shown = list(queryset[:20])
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "objects": shown,
        "more": max(0, len(selected) - len(shown)),
        "selected": selected,
        "action": action,
        "form": form,
        "submit_label": submit_label,
        "opts": modeladmin.model._meta,
    }
    return TemplateResponse(request, "admin/audit/confirm_action.html", context)
