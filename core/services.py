from django.db import transaction

from .models import ApiClient, token_generate, token_hash


@transaction.atomic
def api_client_create(*, name: str, token: str | None = None) -> tuple[ApiClient, str]:
    """Creates an API client and returns it with its token, which is not stored in clear and
    cannot be shown again."""
    token = token or token_generate()
    client = ApiClient.objects.create(
        name=name, token_hash=token_hash(token), token_prefix=token[:8]
    )
    return client, token


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
