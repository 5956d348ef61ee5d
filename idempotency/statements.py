"""The idempotency records' SQL written by hand, in one place beside their model
(docs/subsystems/idempotency.md, "An idempotent API call"): the two counts of a replay, which
commit without waiting for the WAL flush, the console's telemetry. The record's and its
resource's inserts are built in ``idempotency.services`` from the models' fields."""

from __future__ import annotations

import functools

from .models import IdempotencyRecord

_RECORDS = IdempotencyRecord._meta.db_table

# An UPDATE of the console's counters, which a crash may lose, in a statement that is its own
# transaction (autocommit): set_config(..., true) holds for that transaction alone, so that
# its commit does not wait for the WAL flush (the statement must read ``commit_mode``).
_ASYNC_COMMIT_CTE = (
    "WITH commit_mode AS (SELECT set_config('synchronous_commit', 'off', true))"
)


@functools.cache
def record_seen_sql(*, conflict: bool, async_commit: bool) -> str:
    """One count of a replay (or of a 409 conflict) on the record given by id: its counter
    and its last time; with ``async_commit``, its commit does not wait for the WAL flush."""
    count, last = (
        ("conflict_count", "last_conflict_at")
        if conflict
        else ("replay_count", "last_replayed_at")
    )
    sql = f"UPDATE {_RECORDS} SET {count} = {count} + 1, {last} = %s WHERE id = %s"  # noqa: S608 - our names, values are parameters
    if async_commit:
        sql = f"{_ASYNC_COMMIT_CTE} {sql} AND EXISTS (SELECT 1 FROM commit_mode)"  # noqa: S608
    return sql


# The replay of a retry whose body is the body of the request that made the key's live,
# unexpired record: found and counted in one statement, its commit not waiting for the WAL
# flush (``idempotency.services.idempotency_identical_replay``).
IDENTICAL_REPLAY_SQL = (
    f"{_ASYNC_COMMIT_CTE} UPDATE {_RECORDS}"  # noqa: S608 - our names, values are parameters
    " SET replay_count = replay_count + 1, last_replayed_at = %s"
    " WHERE client_id = %s AND operation_type = %s AND key = %s"
    " AND expired_at IS NULL AND expires_at > %s AND request_hash = %s"
    " AND request_hash <> '' AND EXISTS (SELECT 1 FROM commit_mode)"
    " RETURNING response_body, response_location"
)
