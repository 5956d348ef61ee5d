from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.views.decorators.debug import (
    sensitive_post_parameters,
    sensitive_variables,
)

from core.actors import Actor
from core.admin.actions import ReasonForm, confirm_with_reason
from core.admin.filters import DateRangeFilter
from core.admin.mixins import ReadOnlyAdminMixin
from core.admin.status import status_badge
from core.errors import ServiceError
from core.selectors import COUNT_CAP
from core.times import time_display

from ..models import SignatureFailure, SourceHold, WebhookSecret, WebhookSource
from ..pacing import RATE_PROMISE
from ..pausing import webhook_source_pause, webhook_source_resume
from ..schemes import PRIVATE_KEY_PREFIX, public_key_validate, scheme_get
from ..selectors import (
    webhook_source_held_count,
    webhook_source_key_kind,
    webhook_source_list,
    webhook_source_public_keys,
)
from ..sources import (
    DEFAULT_GRACE_SECONDS,
    MAX_GRACE_SECONDS,
    webhook_source_client_set,
    webhook_source_expected_interval_set,
    webhook_source_rotate,
    webhook_source_set_enabled,
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
        max_value=MAX_GRACE_SECONDS,
        initial=DEFAULT_GRACE_SECONDS,
        help_text="How long the current secrets stay valid (at most 30 days).",
    )

    # The source's scheme, whose rules the secret must meet (``for_scheme``).
    scheme = ""

    @classmethod
    def for_scheme(cls, scheme: str) -> type[SecretRotationForm]:
        return type(cls.__name__, (cls,), {"scheme": scheme})

    def clean_secret(self):
        secret = self.cleaned_data["secret"]
        try:
            scheme_get(self.scheme).secret_validate(secret)
        except ServiceError as exc:
            raise forms.ValidationError(str(exc)) from None
        return secret


class _PublicKeyInput(forms.TextInput):
    """A public key is shown as typed (it is not a secret), except a private key typed by
    mistake, which the page never shows back."""

    def format_value(self, value):
        if isinstance(value, str) and value.strip().startswith(PRIVATE_KEY_PREFIX):
            return None
        return super().format_value(value)


class PublicKeyRotationForm(ReasonForm):
    public_key = forms.CharField(
        label="New public key",
        widget=_PublicKeyInput(attrs={"size": 60, "autocomplete": "off"}),
        max_length=255,
        help_text=(
            "Verifies the producer's v1a signatures from now on: whpk_ followed by the "
            "base64 of its 32-byte Ed25519 public key. Never its private key (whsk_)."
        ),
    )
    grace_seconds = forms.IntegerField(
        label="Grace period (seconds)",
        min_value=0,
        max_value=MAX_GRACE_SECONDS,
        initial=DEFAULT_GRACE_SECONDS,
        help_text="How long the current public keys stay valid (at most 30 days).",
    )

    # The source's scheme, which must take public keys (``for_scheme``).
    scheme = ""

    @classmethod
    def for_scheme(cls, scheme: str) -> type[PublicKeyRotationForm]:
        return type(cls.__name__, (cls,), {"scheme": scheme})

    def clean_public_key(self):
        try:
            return public_key_validate(
                scheme=self.scheme, public_key=self.cleaned_data["public_key"]
            )
        except ServiceError as exc:
            raise forms.ValidationError(str(exc)) from None


class SourceResumeForm(ReasonForm):
    rate = forms.FloatField(
        label="Rate (events per second)",
        required=False,
        min_value=0.001,
        max_value=1e6,
        help_text=(
            f"Optional: {RATE_PROMISE}. The held events drain in the order they were "
            "received. Empty: as fast as the relay goes, a document's events still one "
            "after the other."
        ),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["reason"].required = False


class PausedListFilter(admin.SimpleListFilter):
    title = "paused"
    parameter_name = "paused"

    def lookups(self, request, model_admin):
        return [("yes", "Paused"), ("no", "Not paused")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(hold__paused_at__isnull=False)
        if self.value() == "no":
            return queryset.exclude(hold__paused_at__isnull=False)
        return queryset


_EDITABLE_FIELDS = ("expected_delivery_interval_seconds", "client")


@admin.register(WebhookSource)
class WebhookSourceAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    # The secrets are never listed, counted only; the public keys of a source whose producer
    # signs with Ed25519 are not secrets, and its page shows them.
    # The state first: a paused source reads "Paused since … by …" and why. The expected
    # delivery interval, the pause's details and the drain are on the source's page.
    list_display = (
        "state",
        "slug",
        "scheme",
        "handler",
        "secret_count",
        "public_key_count",
        "held_events",
    )
    list_display_links = ("slug",)
    list_filter = ("scheme", "handler", "is_enabled", PausedListFilter)
    search_fields = ("slug",)
    ordering = ("slug",)
    fields = (
        "slug",
        "scheme",
        "handler",
        "timestamp_tolerance_seconds",
        "is_enabled",
        "expected_delivery_interval_seconds",
        "client",
        "state",
        "secret_count",
        "public_keys",
        "paused_since",
        "paused_by",
        "pause_reason",
        "held_events",
        "drain_state",
        "created_at",
        "updated_at",
    )
    # The expected delivery interval (what the "no delivery" alert compares with, see
    # docs/runbook.md) and the API client a GitHub source is bound to are the fields an
    # operator edits here; the rest changes through manage.py webhook_source and the
    # actions.
    readonly_fields = tuple(name for name in fields if name not in _EDITABLE_FIELDS)
    actions = [
        "rotate_secret",
        "pause_selected",
        "resume_selected",
        "disable_selected",
        "enable_selected",
    ]

    def get_queryset(self, request):
        return webhook_source_list()

    def has_change_permission(self, request, obj=None):
        return request.user.has_perm("webhooks.change_webhooksource")

    def save_model(self, request, obj, form, change):
        webhook_source_expected_interval_set(
            source=obj,
            seconds=form.cleaned_data["expected_delivery_interval_seconds"],
            actor=Actor.of(request.user),
        )
        if "client" in form.changed_data:
            # Which client's deployments the source may move: an operator action.
            webhook_source_client_set(
                source=obj,
                client=form.cleaned_data["client"],
                actor=Actor.of(request.user),
                reason="changed in the admin",
            )

    def log_change(self, request, obj, message):
        pass  # the operator action of the service is the record

    @admin.display(description="secrets", ordering="secret_count")
    def secret_count(self, obj):
        return obj.secret_count

    @admin.display(description="public keys", ordering="public_key_count")
    def public_key_count(self, obj):
        return obj.public_key_count

    @admin.display(description="public keys")
    def public_keys(self, obj):
        """The producer's public keys (not secrets: shown whole), newest first, with the
        fingerprint an inbox row records of the key that verified it, and whether each
        verifies now."""
        keys = webhook_source_public_keys(source_ids=[obj.pk]).get(obj.pk, [])
        if not keys:
            return "-"
        now = timezone.now()
        rows = []
        for key in keys:
            if key.expires_at is None:
                state = "verifies now"
            elif key.expires_at > now:
                state = f"valid until {time_display(key.expires_at)}"
            else:
                state = f"expired {time_display(key.expires_at)}"
            rows.append(
                (key.public_key, key.fingerprint, time_display(key.created_at), state)
            )
        return format_html_join(
            mark_safe("<br>"),
            "<code>{}</code> (fingerprint <code>{}</code>), added {}, {}",
            rows,
        )

    @staticmethod
    def _paused(obj) -> SourceHold | None:
        hold = obj.current_hold
        return hold if hold is not None and hold.paused_at is not None else None

    @admin.display(description="state")
    def state(self, obj):
        hold = self._paused(obj)
        if hold is not None:
            badge = status_badge(
                "paused",
                f"since {time_display(hold.paused_at)} by {hold.paused_by_name or '-'}",
            )
            why = self.pause_reason_summary(obj)
            if why:
                return format_html('{}<div class="why">{}</div>', badge, why)
            return badge
        if not obj.is_enabled:
            return status_badge("disabled")
        current = obj.current_hold
        if current is not None and current.drain_started_at is not None:
            return status_badge("draining")
        return status_badge("enabled")

    @admin.display(description="paused since")
    def paused_since(self, obj):
        hold = self._paused(obj)
        return time_display(hold.paused_at) if hold else "-"

    @admin.display(description="paused by")
    def paused_by(self, obj):
        hold = self._paused(obj)
        return hold.paused_by_name if hold else "-"

    @admin.display(description="why paused")
    def pause_reason(self, obj):
        hold = self._paused(obj)
        return hold.pause_reason if hold else ""

    @admin.display(description="why paused")
    def pause_reason_summary(self, obj):
        text = self.pause_reason(obj)
        return text if len(text) <= 60 else text[:59] + "…"

    @admin.display(description="held events")
    def held_events(self, obj):
        """Events waiting because the source is paused, or still draining after a resume: a
        bounded count, of those sources only."""
        hold = obj.current_hold
        if hold is None:
            return "-"
        count = webhook_source_held_count(source_id=obj.pk)
        shown = f"{COUNT_CAP}+" if count > COUNT_CAP else str(count)
        return shown if hold.paused_at is not None else f"{shown} (draining)"

    @admin.display(description="draining")
    def drain_state(self, obj):
        hold = obj.current_hold
        if hold is None or hold.drain_started_at is None:
            return "-"
        rate = f"at most {hold.drain_rate:g}/s" if hold.drain_rate else "no rate limit"
        return format_html(
            "since {}, {}, {} released so far",
            time_display(hold.drain_started_at),
            rate,
            hold.drain_released,
        )

    def has_rotate_secret_permission(self, request):
        return request.user.has_perm("webhooks.rotate_secret")

    def has_pause_source_permission(self, request):
        return request.user.has_perm("webhooks.pause_source")

    def has_enable_source_permission(self, request):
        return request.user.has_perm("webhooks.enable_source")

    def _set_enabled(self, request, queryset, *, enabled: bool):
        if not self.has_enable_source_permission(request):
            raise PermissionDenied
        verb = "Enable" if enabled else "Disable"
        reason = confirm_with_reason(
            self,
            request,
            queryset,
            action=f"{verb.lower()}_selected",
            title=f"{verb} webhook sources",
            intro=(
                "These sources accept deliveries again."
                if enabled
                else "These sources answer 404 to every delivery, in every web process "
                "by the time this returns; producers notice. To hold their events while "
                "still accepting them, pause the sources instead."
            ),
            submit_label=verb,
        )
        if isinstance(reason, HttpResponse):
            return reason
        changed = [
            source.slug
            for source in queryset.order_by("slug")
            if webhook_source_set_enabled(
                source=source,
                enabled=enabled,
                actor=Actor.of(request.user),
                reason=reason,
            )
        ]
        done = "Enabled" if enabled else "Disabled"
        self.message_user(
            request,
            f"{done} {', '.join(changed)}." if changed else "Nothing to change.",
            messages.SUCCESS if changed else messages.WARNING,
        )
        return None

    @admin.action(description="Disable selected sources", permissions=["enable_source"])
    def disable_selected(self, request, queryset):
        return self._set_enabled(request, queryset, enabled=False)

    @admin.action(description="Enable selected sources", permissions=["enable_source"])
    def enable_selected(self, request, queryset):
        return self._set_enabled(request, queryset, enabled=True)

    @admin.action(description="Pause selected sources", permissions=["pause_source"])
    def pause_selected(self, request, queryset):
        if not self.has_pause_source_permission(request):
            raise PermissionDenied
        reason = confirm_with_reason(
            self,
            request,
            queryset,
            action="pause_selected",
            title="Pause webhook sources",
            intro=(
                "Deliveries to these sources are still verified, stored and answered as "
                "before; their events wait unprocessed until the source is resumed. Events "
                "already being processed finish."
            ),
            submit_label="Pause",
        )
        if isinstance(reason, HttpResponse):
            return reason
        paused, refused = [], []
        for source in queryset.order_by("slug"):
            try:
                webhook_source_pause(
                    source=source, reason=reason, actor=Actor.of(request.user)
                )
            except ServiceError as exc:
                refused.append(f"{source.slug}: {exc}")
                continue
            paused.append(source.slug)
        if paused:
            self.message_user(
                request,
                f"Paused {', '.join(paused)}: their events wait until resumed.",
                messages.SUCCESS,
            )
        for text in refused:
            self.message_user(request, f"Not paused: {text}", messages.WARNING)
        return None

    @admin.action(description="Resume selected sources", permissions=["pause_source"])
    def resume_selected(self, request, queryset):
        if not self.has_pause_source_permission(request):
            raise PermissionDenied
        data = confirm_with_reason(
            self,
            request,
            queryset,
            action="resume_selected",
            title="Resume webhook sources",
            intro=(
                "The events these sources held are processed in the order they were "
                "received, at the rate given if any; new deliveries queue behind them."
            ),
            submit_label="Resume",
            form_class=SourceResumeForm,
        )
        if isinstance(data, HttpResponse):
            return data
        resumed, refused = [], []
        for source in queryset.order_by("slug"):
            try:
                action = webhook_source_resume(
                    source=source,
                    rate=data["rate"],
                    actor=Actor.of(request.user),
                    reason=data["reason"],
                )
            except ServiceError as exc:
                refused.append(f"{source.slug}: {exc}")
                continue
            held = action.details["held_events"]
            more = "+" if action.details["held_events_capped"] else ""
            resumed.append(f"{source.slug} ({held}{more} held)")
        if resumed:
            pace = (
                f"at most {data['rate']:g} events/s"
                if data["rate"]
                else "no rate limit"
            )
            self.message_user(
                request,
                f"Resumed {', '.join(resumed)}; draining in order, {pace}.",
                messages.SUCCESS,
            )
        for text in refused:
            self.message_user(request, f"Not resumed: {text}", messages.WARNING)
        return None

    @admin.action(
        description="Rotate secret or public key", permissions=["rotate_secret"]
    )
    @sensitive_variables("data")
    def rotate_secret(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(
                request, "Select exactly one source to rotate.", messages.WARNING
            )
            return None
        source = queryset.get()
        # A source that holds its producer's public key is rotated to a new public key,
        # never to a secret (``webhook_source_rotate``).
        public = webhook_source_key_kind(source=source) == WebhookSecret.Kind.PUBLIC_KEY
        if public:
            what = "public key"
            intro = (
                "The new public key verifies the producer's v1a signatures from now on; "
                "the current ones stay valid for the grace period. A public key is not a "
                "secret: the source's page shows each with its fingerprint."
            )
            form_class: type[ReasonForm] = PublicKeyRotationForm.for_scheme(
                source.scheme
            )
        else:
            what = "secret"
            intro = (
                "The new secret signs from now on; the current ones stay valid for the "
                "grace period. It is stored for verification and never shown again here."
            )
            form_class = SecretRotationForm.for_scheme(source.scheme)
        data = confirm_with_reason(
            self,
            request,
            queryset,
            action="rotate_secret",
            title=f"Rotate the {what} of {source.slug}",
            intro=intro,
            submit_label="Rotate",
            form_class=form_class,
        )
        if isinstance(data, HttpResponse):
            return data
        try:
            webhook_source_rotate(
                source=source,
                secret=data.get("secret"),
                public_key=data.get("public_key"),
                grace_seconds=data["grace_seconds"],
                actor=Actor.of(request.user),
                reason=data["reason"],
            )
        except ServiceError as exc:
            self.message_user(request, f"Not rotated: {exc}", messages.ERROR)
            return None
        self.message_user(
            request,
            f"Rotated the {what} of {source.slug}; the previous ones expire in "
            f"{data['grace_seconds']} s.",
            messages.SUCCESS,
        )
        return None

    @method_decorator(sensitive_post_parameters("secret", "public_key"))
    def changelist_view(self, request, extra_context=None):
        # Actions post to the changelist: the rotation form's secret (or a private key
        # typed where a public key goes) never reaches an error report or a debug page.
        return super().changelist_view(request, extra_context)


@admin.register(SignatureFailure)
class SignatureFailureAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("window_start", "source", "reason", "count", "last_remote_addr")
    list_filter = ("reason", "source", ("window_start", DateRangeFilter))
    list_select_related = ("source",)
    ordering = ("-window_start", "-id")
    date_hierarchy = "window_start"
