from .models import ApiClient, token_hash


def api_client_by_token(*, token: str) -> ApiClient | None:
    if not token:
        return None
    return ApiClient.objects.filter(
        token_hash=token_hash(token), is_active=True
    ).first()
