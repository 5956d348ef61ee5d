from django.db import transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from .actors import Actor
from .errors import InvalidPayload
from .models import ApiClient, token_generate, token_hash
from .secrets import secret_problem
from .trail import trail_record


@sensitive_variables("token")
@transaction.atomic
def api_client_create(
    *, name: str, actor: Actor, token: str | None = None
) -> tuple[ApiClient, str]:
    """Creates an API client and returns it with its token, which is not stored in clear and
    cannot be shown again; records the operator action (its name and token prefix). A given
    token with a stray character (``secrets.secret_problem``: its client could never send
    it as given) is refused, ``InvalidPayload``, never quoted."""
    problem = secret_problem(token) if token else ""
    if problem:
        raise InvalidPayload(
            f"the token {problem}",
            details={"token": [f"The token {problem}: give it again without it."]},
        )
    token = token or token_generate()
    client = ApiClient.objects.create(
        name=name, token_hash=token_hash(token), token_prefix=token[:8]
    )
    trail_record(
        action="create_api_client",
        actor=actor,
        details={
            "client": client.name,
            "client_id": client.pk,
            "token_prefix": client.token_prefix,
        },
    )
    return client, token


@transaction.atomic
def api_client_set_active(*, client: ApiClient, active: bool, actor: Actor) -> bool:
    """Activates or deactivates ``client`` (a deactivated client's token is refused) and
    records the operator action with the state before and after; returns whether it
    changed (nothing is recorded when it does not)."""
    locked = ApiClient.objects.select_for_update().get(pk=client.pk)
    before = locked.is_active
    client.is_active = active
    if before == active:
        return False
    ApiClient.objects.filter(pk=client.pk).update(
        is_active=active, updated_at=timezone.now()
    )
    trail_record(
        action="activate_api_client" if active else "deactivate_api_client",
        actor=actor,
        details={
            "client": client.name,
            "client_id": client.pk,
            "before": before,
            "after": active,
        },
    )
    return True


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
