from django.db.models import QuerySet

from .models import ApiClient, token_hash

# Counts that could grow without limit (admin lists, the dashboard) stop here.
COUNT_CAP = 10_000


def api_client_by_token(*, token: str) -> ApiClient | None:
    if not token:
        return None
    return ApiClient.objects.filter(
        token_hash=token_hash(token), is_active=True
    ).first()


def capped_count(queryset: QuerySet, *, cap: int = COUNT_CAP) -> int:
    """``min(count, cap + 1)``: a count that never reads more than ``cap + 1`` rows."""
    return queryset.order_by().values("pk")[: cap + 1].count()
