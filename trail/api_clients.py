"""The operator's changes to core's API clients, each recorded in the trail with the change
(docs/security.md, "Every change of trust is an operator action"): core sits below the trail,
so its clients' services live here, the lowest layer that may record."""

from django.db import transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from core.actors import Actor
from core.errors import InvalidPayload
from core.models import ApiClient, ApiRole, token_generate, token_hash
from core.secrets import secret_problem

from .services import operator_action_record


@sensitive_variables("token")
@transaction.atomic
def api_client_create(
    *, name: str, actor: Actor, token: str | None = None, role: str = ApiRole.CI
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
    _role_check(role)
    token = token or token_generate()
    client = ApiClient.objects.create(
        name=name, token_hash=token_hash(token), token_prefix=token[:8], role=role
    )
    operator_action_record(
        action="create_api_client",
        actor=actor,
        details={
            "client": client.name,
            "client_id": client.pk,
            "token_prefix": client.token_prefix,
            "role": client.role,
        },
    )
    return client, token


def _role_check(role: str) -> None:
    if role not in ApiRole.values:
        raise InvalidPayload(
            f"no role {role!r}",
            details={"role": [f"One of: {', '.join(ApiRole.values)}."]},
        )


@transaction.atomic
def api_client_set_role(*, client: ApiClient, role: str, actor: Actor) -> bool:
    """Gives ``client`` the role ``role`` (``core.models.ApiRole``; in effect in every web
    process within ``API_CLIENT_CACHE_SECONDS``) and records the operator action with the
    role before and after; returns whether it changed. Only an operator at the console or
    a shell sets a role: no API endpoint mints, elevates or rotates a client."""
    _role_check(role)
    locked = ApiClient.objects.select_for_update().get(pk=client.pk)
    before = locked.role
    client.role = role
    if before == role:
        return False
    ApiClient.objects.filter(pk=client.pk).update(role=role, updated_at=timezone.now())
    operator_action_record(
        action="set_api_client_role",
        actor=actor,
        details={
            "client": client.name,
            "client_id": client.pk,
            "before": before,
            "after": role,
        },
    )
    return True


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
    operator_action_record(
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
