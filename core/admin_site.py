"""The admin site of the audit console: Django's, with a second factor (django-otp, TOTP
devices) as ``ADMIN_TWO_FACTOR`` says (docs/security.md, "Second factor").

- ``off``: no second factor.
- ``offered``: staff who enrolled a device must give its token; the others log in with their
  password.
- ``superusers`` (the production default): as ``offered``, and a superuser without a device
  cannot log in until one is enrolled (``manage.py admin_2fa enrol USERNAME``).
- ``staff``: every staff user needs a device.

A session that applies but was not verified by a device (one from before the setting, or
logged in some other way) is sent to the login page again."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django_otp import devices_for_user, user_has_device
from django_otp.admin import OTPAdminAuthenticationForm

TWO_FACTOR_MODES = ("off", "offered", "superusers", "staff")


def two_factor_required(user) -> bool:
    """Whether ``user`` must have a device, whether or not it has one."""
    mode = settings.ADMIN_TWO_FACTOR
    return mode == "staff" or (mode == "superusers" and user.is_superuser)


def two_factor_applies(user) -> bool:
    """Whether ``user`` logs in to the admin with a second factor."""
    if settings.ADMIN_TWO_FACTOR == "off" or not user.is_authenticated:
        return False
    return two_factor_required(user) or user_has_device(user)


class TwoFactorLoginForm(OTPAdminAuthenticationForm):
    """The admin's login form with django-otp's token field, asked for only where the second
    factor applies; a user with one device need not pick it."""

    error_messages = {
        **AdminAuthenticationForm.error_messages,
        "device_missing": (
            "This account needs a second factor and has no device yet. An operator enrols "
            "one with: python manage.py admin_2fa enrol %(username)s"
        ),
    }

    def clean(self):
        self.cleaned_data = AdminAuthenticationForm.clean(self)
        user = self.get_user()
        if user is not None and two_factor_applies(user):
            if not user_has_device(user):
                raise forms.ValidationError(
                    self.error_messages["device_missing"],
                    code="device_missing",
                    params={"username": user.get_username()},
                )
            self.clean_otp(user)
        return self.cleaned_data

    def _chosen_device(self, user):
        device = super()._chosen_device(user)
        if device is None:
            devices = list(devices_for_user(user))
            if len(devices) == 1:
                return devices[0]
        return device


class AuditAdminSite(admin.AdminSite):
    site_header = "Webhook inbox audit console"
    site_title = "Audit console"
    index_title = "Dashboard"
    # There is no public site behind the console: no "View site" link to a 404.
    site_url = None
    # The lists need the page's width (docs/console.md); the index and the breadcrumbs
    # lead everywhere the sidebar did.
    enable_nav_sidebar = False
    login_form = TwoFactorLoginForm
    login_template = "otp/admin111/login.html"

    def register(self, model_or_iterable, admin_class=None, **options):
        """Every admin registered here, the third-party apps' too, gets
        ``CalendarEndsAdminMixin``: its list answers a date at the ends of the calendar
        rather than a 500 (docs/security.md, "Values the database refuses")."""
        # Imported here, not with the module: this site is built while Django discovers
        # the admins, and the package ``core.admin`` registers core's own on it.
        from .admin.mixins import CalendarEndsAdminMixin

        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, CalendarEndsAdminMixin):
            admin_class = type(
                admin_class.__name__,
                (CalendarEndsAdminMixin, admin_class),
                {
                    "__module__": admin_class.__module__,
                    "__qualname__": admin_class.__qualname__,
                },
            )
        super().register(model_or_iterable, admin_class, **options)

    def has_permission(self, request):
        if not super().has_permission(request):
            return False
        return not two_factor_applies(request.user) or request.user.is_verified()
