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
