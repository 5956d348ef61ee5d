"""The confirmation page of an admin action that needs a reason: the reason is recorded with
the operator action the service writes (docs/console.md).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from ..selectors import COUNT_CAP, capped_count


class ReasonForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=2000,
        help_text="Recorded with the operator action; auditors read it.",
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
    # "Select all N" (``select_across``) is kept through the confirmation, so that the action
    # acts on what was selected, not only on the rows ticked on the page.
    select_across = request.POST.get("select_across") == "1"
    shown = list(queryset[:20])
    total = capped_count(queryset) if select_across else len(selected)
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "objects": shown,
        "more": max(0, total - len(shown)),
        "more_capped": total > COUNT_CAP,
        "selected": selected,
        "select_across": select_across,
        "action": action,
        "form": form,
        "submit_label": submit_label,
        "opts": modeladmin.model._meta,
    }
    return TemplateResponse(request, "admin/confirm_action.html", context)
