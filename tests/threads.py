"""Real threads for concurrency tests, each on its own database connection (PostgreSQL decides
the races, as it does between workers)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from django.db import connection, connections, transaction

from research.models import ResearchDocument


def run_together(
    calls: Sequence[Callable[[], Any]], *, timeout: float = 120
) -> tuple[list[Any], list[BaseException]]:
    """Each call in its own thread, all released at the same moment; each thread closes its
    database connections when its call ends. Returns what the calls returned (in the order of
    ``calls``, leaving out those that raised) and what they raised."""
    barrier = threading.Barrier(len(calls))
    returned: dict[int, Any] = {}
    errors: list[BaseException] = []

    def run(index: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=30)
            returned[index] = call()
        except BaseException as exc:  # handed to the test, which asserts on it
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=run, args=(index, call))
        for index, call in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(thread.is_alive() for thread in threads), (
        f"still running after {timeout}s"
    )
    return [returned[index] for index in sorted(returned)], errors


@contextlib.contextmanager
def document_locked(entity_id: str, *, at_most: float = 120) -> Iterator[None]:
    """Inside, another connection holds the document's row lock, as a stuck transaction would:
    every attempt to apply an event to that document waits on the lock and times out."""
    with row_locked(
        lambda: ResearchDocument.objects.select_for_update().get(entity_id=entity_id),
        at_most=at_most,
    ):
        yield


@contextlib.contextmanager
def row_locked(lock: Callable[[], Any], *, at_most: float = 120) -> Iterator[None]:
    """Inside, another connection holds the row lock that ``lock`` takes (a
    ``select_for_update`` of it), as a stuck transaction would."""
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                lock()
                locked.set()
                release.wait(timeout=at_most)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        assert locked.wait(timeout=10), "the row was not locked"
        yield
    finally:
        release.set()
        holder.join(timeout=10)


def row_lock_waited_for() -> bool:
    """Whether a session waits for a row lock it asked for with ``FOR UPDATE`` (a worker's
    run blocked by ``document_locked``, say)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND query ILIKE '%%FOR UPDATE%%'"
        )
        return cursor.fetchone()[0] > 0
