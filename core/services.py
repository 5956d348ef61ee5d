from django.db import transaction


class TwoFactorDeviceExists(Exception):
    """The user already has a device, and no replacement was asked for."""


@transaction.atomic
def admin_totp_device_enrol(*, username: str, replace: bool = False):
    """A new confirmed TOTP device for the staff user ``username`` (docs/security.md, "Second
    factor"), returned with its key: the caller shows its ``config_url`` once. With
    ``replace``, the user's other TOTP devices are removed in the same transaction; without
    it, a user who has one raises ``TwoFactorDeviceExists``. Raises ``DoesNotExist`` for an
    unknown or non-staff user."""
    from django.contrib.auth import get_user_model
    from django_otp.plugins.otp_totp.models import TOTPDevice

    user = (
        get_user_model()
        .objects.select_for_update()
        .get(**{get_user_model().USERNAME_FIELD: username}, is_staff=True)
    )
    existing = TOTPDevice.objects.filter(user=user)
    if existing.exists() and not replace:
        raise TwoFactorDeviceExists(username)
    existing.delete()
    return TOTPDevice.objects.create(user=user, name="admin", confirmed=True)


def admin_totp_devices_remove(*, username: str) -> int:
    """Removes the TOTP devices of ``username``; returns how many there were."""
    from django_otp.plugins.otp_totp.models import TOTPDevice

    count, _ = TOTPDevice.objects.filter(
        **{f"user__{_username_field()}": username}
    ).delete()
    return count


def _username_field() -> str:
    from django.contrib.auth import get_user_model

    return get_user_model().USERNAME_FIELD
