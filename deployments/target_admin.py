"""The deploy targets' admin (operators create and change them; auditors view them): the
secret is write-only (a password field that never shows the stored value; the lists and
pages show its fingerprint), every save is an operator action (``targets.deploy_target_save``),
and "Send test trigger" asks a worker to send a test to each selected target: the list shows
each target's last test, and reloads itself until its outcome comes."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.template.response import TemplateResponse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import (
    sensitive_post_parameters,
    sensitive_variables,
)

from core.actors import Actor
from core.admin.pagination import BoundedCountPaginator
from core.times import time_display

from .models import BreakerState, DeployTarget
from .selectors import deploy_target_last_tests
from .services.breakers import breaker_set
from .targets import (
    deploy_target_errors,
    deploy_target_save,
    deploy_target_test_request,
)
from .trigger_urls import url_query_fingerprint, url_shown

# At most this many targets per "Send test trigger": each is a task for the workers.
TEST_TRIGGER_MAX_TARGETS = 5
# While a test shown waits for its outcome, the list reloads itself this often.
TEST_REFRESH_SECONDS = 2


# The fields an operator edits (the secret apart: write-only).
TARGET_FIELDS = [
    "name",
    "executor",
    "repository_pattern",
    "environment_pattern",
    "applies_to",
    "clients",
    "priority",
    "url",
    "is_enabled",
    "max_in_flight",
]
# Of those, the target's own columns (the clients are a relation, set by the service).
COLUMN_FIELDS = [name for name in TARGET_FIELDS if name != "clients"]


class DeployTargetForm(forms.ModelForm):
    url = forms.URLField(
        label="URL",
        required=False,
        max_length=500,
        assume_scheme="https",
        help_text=(
            f"{DeployTarget._meta.get_field('url').help_text} Its query (a Jenkins "
            "?token=) is write-only: the page shows the URL without it, and its "
            "fingerprint. Saved as shown, the URL keeps its query; another address "
            "never does. No user information (user:password@)."
        ),
    )
    url_query_clear = forms.BooleanField(
        label="Remove the URL's query",
        required=False,
        help_text="The URL as shown, without the query it has now.",
    )
    secret = forms.CharField(
        label="Secret",
        required=False,
        strip=False,
        max_length=255,
        # Typed by the operator, never echoed back: the admin shows no secret, ever.
        widget=forms.PasswordInput(render_value=False),
        help_text=(
            "http: the receiver's whsec_ secret; github, github-actions: a token. "
            "Write-only: leave it "
            "empty to keep the current one. Empty on a new target: the executor's own "
            "setting (DEPLOY_HTTP_SECRET, GITHUB_TOKEN)."
        ),
    )

    class Meta:
        model = DeployTarget
        fields = TARGET_FIELDS

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.url:
            # The query is write-only, as the secret is: never rendered.
            self.initial["url"] = url_shown(self.instance.url)

    @sensitive_variables()
    def clean(self):
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        current = (
            DeployTarget.objects.get(pk=self.instance.pk)
            if self.instance.pk is not None
            else None
        )
        secret = cleaned.get("secret") or ""
        if not secret and current is not None:
            secret = current.secret
        if current is not None:
            cleaned["url"] = url_kept(
                typed=cleaned.get("url") or "",
                stored=current.url,
                clear_query=bool(cleaned.get("url_query_clear")),
            )
        # The target as it would be saved (the form sets the instance's fields only after
        # this).
        candidate = DeployTarget(**{name: cleaned.get(name) for name in COLUMN_FIELDS})
        for field, problems in deploy_target_errors(
            target=candidate, secret=secret
        ).items():
            for problem in problems:
                self.add_error(field if field in self.fields else None, problem)
        return cleaned


def url_kept(*, typed: str, stored: str, clear_query: bool) -> str:
    """The URL a target is saved with: the stored one (its query with it) when the URL
    typed is the one the form showed (the stored URL without its query) and the query is
    not to be removed; else the URL typed. An address changed never keeps the query: a
    token meant for one receiver goes to no other."""
    if typed and typed == url_shown(stored) and not clear_query:
        return stored
    return typed


@admin.register(DeployTarget)
class DeployTargetAdmin(admin.ModelAdmin):
    form = DeployTargetForm
    list_display = [
        "name",
        "executor",
        "repository_pattern",
        "environment_pattern",
        "applies_to",
        "clients_served",
        "priority",
        "url_display",
        "secret_fingerprint",
        "is_enabled",
        "breaker",
        "last_test",
        "updated_at",
    ]
    list_filter = ["executor", "is_enabled", "breaker_state", "clients"]
    filter_horizontal = ["clients"]
    search_fields = ["name", "repository_pattern"]
    ordering = ["priority", "id"]
    readonly_fields = [
        "url_query",
        "secret_fingerprint",
        "breaker",
        "last_test",
        "created_at",
        "updated_at",
    ]
    paginator = BoundedCountPaginator
    show_full_result_count = False
    actions = ["send_test_trigger", "open_breaker", "close_breaker"]

    def get_fields(self, request, obj=None):
        fields = list(TARGET_FIELDS)
        # The write-only fields, for those who may write: a page shown read-only would show
        # the stored value (the URL is shown without its query).
        if (
            self.has_change_permission(request, obj)
            if obj is not None
            else self.has_add_permission(request)
        ):
            fields.append("secret")
            if obj is not None and url_query_fingerprint(obj.url):
                fields.insert(fields.index("url") + 1, "url_query_clear")
        else:
            fields[fields.index("url")] = "url_display"
        if obj is not None:
            fields += self.readonly_fields
        return fields

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("clients")

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        # Each target's last test, for the page's rows, in one read.
        targets = list(changelist.result_list)
        tests = deploy_target_last_tests(target_ids=[target.pk for target in targets])
        for target in targets:
            target.last_test_shown = tests.get(target.pk)
        return changelist

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        if not isinstance(response, TemplateResponse) or response.context_data is None:
            return response  # a redirect (after an action), an error page
        context = response.context_data
        changelist = context.get("cl")
        if changelist is not None and any(
            target.last_test_shown is not None and target.last_test_shown.pending()
            for target in changelist.result_list
        ):
            # The page reloads itself until the tests it shows have an outcome.
            context["test_refresh_seconds"] = TEST_REFRESH_SECONDS
        return response

    def has_delete_permission(self, request, obj=None):
        return False  # the jobs it routed name it: disable it instead

    def has_test_permission(self, request):
        return request.user.has_perm("deployments.test_deploytarget")

    @admin.display(description="URL")
    def url_display(self, obj):
        if not obj.url:
            return "-"
        query = url_query_fingerprint(obj.url)
        shown = url_shown(obj.url)
        return f"{shown} (query {query})" if query else shown

    @admin.display(description="URL query")
    def url_query(self, obj):
        return url_query_fingerprint(obj.url) or "-"

    @admin.display(description="API clients")
    def clients_served(self, obj):
        names = sorted(client.name for client in obj.clients.all())
        return ", ".join(names) if names else "every client"

    @admin.display(description="last test")
    def last_test(self, obj):
        if hasattr(obj, "last_test_shown"):
            test = obj.last_test_shown
        else:
            test = deploy_target_last_tests(target_ids=[obj.pk]).get(obj.pk)
        if test is None:
            return "-"
        return f"{test.summary()} ({time_display(test.requested_at)})"

    @admin.display(description="secret")
    def secret_fingerprint(self, obj):
        return obj.secret_fingerprint or "-"

    @admin.display(description="breaker", ordering="breaker_state")
    def breaker(self, obj):
        """Its circuit breaker: the state, since when, the failures in a row, the probe."""
        state = BreakerState(obj.breaker_state)
        parts = [str(state.label)]
        if obj.breaker_changed_at is not None and state != BreakerState.CLOSED:
            parts.append(f"since {time_display(obj.breaker_changed_at)}")
        if obj.breaker_failures:
            parts.append(f"{obj.breaker_failures} failed in a row")
        if state == BreakerState.HALF_OPEN and obj.breaker_probe_id is not None:
            parts.append(f"probe: job {obj.breaker_probe_id}")
        return ", ".join(parts)

    @sensitive_variables()
    def save_model(self, request, obj, form, change):
        deploy_target_save(
            target=obj,
            secret=form.cleaned_data.get("secret") or None,
            actor=Actor.of(request.user),
            reason="changed in the admin" if change else "created in the admin",
            clients=list(form.cleaned_data.get("clients") or []),
        )

    def save_related(self, request, form, formsets, change):
        pass  # the clients are set by deploy_target_save, in its operator action

    # The URL too: its query may hold a token.
    @method_decorator(sensitive_post_parameters("secret", "url"))
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return super().changeform_view(request, object_id, form_url, extra_context)

    @admin.action(description="Send test trigger", permissions=["test"])
    def send_test_trigger(self, request, queryset):
        if not self.has_test_permission(request):
            raise PermissionDenied
        targets = list(
            queryset.order_by("priority", "id")[: TEST_TRIGGER_MAX_TARGETS + 1]
        )
        if len(targets) > TEST_TRIGGER_MAX_TARGETS:
            self.message_user(
                request,
                f"Select at most {TEST_TRIGGER_MAX_TARGETS} targets to test at once.",
                messages.WARNING,
            )
            return None
        actor = Actor.of(request.user)
        for target in targets:
            test = deploy_target_test_request(target=target, actor=actor)
            if test is None:
                self.message_user(
                    request,
                    f"{target.name}: nothing to send: this executor calls nothing",
                    messages.INFO,
                )
                continue
            self.message_user(
                request,
                f"{target.name}: test trigger queued; a worker sends it, and the "
                "list's last test column shows what came back.",
                messages.SUCCESS,
            )
        return None

    @admin.action(
        description="Open breaker (hold its triggers)", permissions=["change"]
    )
    def open_breaker(self, request, queryset):
        self._breaker_set(request, queryset, BreakerState.OPEN)

    @admin.action(
        description="Close breaker (let its triggers through)", permissions=["change"]
    )
    def close_breaker(self, request, queryset):
        self._breaker_set(request, queryset, BreakerState.CLOSED)

    def _breaker_set(self, request, queryset, state: str) -> None:
        """Each selected target's breaker opened or closed by the operator, each change an
        operator action (``breakers.breaker_set``)."""
        actor = Actor.of(request.user)
        word = "opened" if state == BreakerState.OPEN else "closed"
        for target in queryset.order_by("priority", "id"):
            with transaction.atomic():
                changed = breaker_set(
                    target=target,
                    state=state,
                    actor=actor,
                    reason=f"{word} in the admin",
                )
            self.message_user(
                request,
                f"{target.name}: breaker {word}"
                if changed
                else f"{target.name}: its breaker already was {word}",
                messages.SUCCESS if changed else messages.INFO,
            )
