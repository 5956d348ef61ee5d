"""The operator's changes to core's API clients, each recorded in the trail with the change
(docs/security.md, "Every change of trust is an operator action"): core sits below the trail,
so its clients' services live here, the lowest layer that may record."""

from django.db import transaction
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from core.actors import Actor
from core.errors import InvalidPayload
from core.models import ApiClient, token_generate, token_hash
from core.secrets import secret_problem

from .services import operator_action_record


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
    operator_action_record(
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
