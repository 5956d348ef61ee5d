import time

from django.conf import settings
from django.db import connection
from django.db.models import QuerySet

from .models import ApiClient, BoundedQuerySet, token_hash

# Counts that could grow without limit (admin lists, the dashboard) stop here.
COUNT_CAP = 10_000

_CLIENT_FIELDS = ("id", "name", "token_prefix", "is_active", "role")
_CLIENT_BY_TOKEN_SQL = (
    f"SELECT {', '.join(_CLIENT_FIELDS)} FROM {ApiClient._meta.db_table}"  # noqa: S608
    " WHERE token_hash = %s AND is_active"
)
# Per process: token hash -> (when read, the active client or None).
_clients: dict[str, tuple[float, ApiClient | None]] = {}
_CLIENTS_KEPT = (
    1000  # a process serves a few clients; unknown tokens are not kept at all
)


def api_client_by_token(*, token: str) -> ApiClient | None:
    """The active client the token belongs to. Every API request asks this: a process keeps
    the answer for ``API_CLIENT_CACHE_SECONDS`` (a deactivated client is refused by every
    process within that time), read with one statement that skips the ORM's query building.
    A token that matches no active client is read again on each request."""
    if not token:
        return None
    digest = token_hash(token)
    max_age = settings.API_CLIENT_CACHE_SECONDS
    kept = _clients.get(digest) if max_age > 0 else None
    if kept is not None and time.monotonic() - kept[0] <= max_age:
        return kept[1]
    with connection.cursor() as cursor:
        cursor.execute(_CLIENT_BY_TOKEN_SQL, [digest])
        row = cursor.fetchone()
    if row is None:
        _clients.pop(digest, None)
        return None
    client = ApiClient.from_db(connection.alias, _CLIENT_FIELDS, row)
    if max_age > 0:
        if len(_clients) >= _CLIENTS_KEPT:
            _clients.clear()
        _clients[digest] = (time.monotonic(), client)
    return client


def capped_count(queryset: QuerySet, *, cap: int = COUNT_CAP) -> int:
    """``min(count, cap + 1)``: a count that never reads more than ``cap + 1`` rows, and
    none when the queryset knows it holds more than ``cap`` (``core.models.BoundedQuerySet``:
    a search that found more than that, say, whose rows may lie anywhere in the days it
    bounds them by, and a count would read those days in their order on disk until it had
    ``cap + 1``)."""
    if isinstance(queryset, BoundedQuerySet) and queryset.known_more_than() >= cap:
        return cap + 1
    return queryset.order_by().values("pk")[: cap + 1].count()
