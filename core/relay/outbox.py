"""An outbox, as the relay serves it: the class an app subclasses for its rows, the register
its ``AppConfig.ready`` adds it to, and one round of one outbox (claim or sweep, publish,
commit). See docs/subsystems/relay.md, "The outboxes" and "A round".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from celery import current_app
from django.db import transaction
from django.utils import timezone

from ..logging import correlation_id_bound
from ..tracing import messaging_attributes, span, tracing_enabled

# What identifies a group of rows an outbox holds back (the inbox: a source's id).
Group = TypeVar("Group", bound=Hashable)


@dataclass(frozen=True)
class Publication:
    """One message: the task to run and its arguments, with the correlation id it carries."""

    task: str
    args: list
    correlation_id: str = ""
    # The outbox rows it carries, for an outbox with flow control (``Outbox.flow_control``).
    rows: tuple[int, ...] = ()


class Outbox(Generic[Group]):
    """How the relay serves one kind of outbox row: a subclass per kind, in the app that owns
    the rows (``webhooks.outbox.InboxOutbox``, ``deployments.outbox.JobOutbox``), registered
    from its ``AppConfig.ready`` (``outbox_register``). As with Django's ``ModelAdmin``, a
    subclass implements what it must and overrides what it needs of the rest.

    Required: ``claim(limit)`` and ``sweep(limit)`` run inside the relay's transaction: they
    lock and stamp the rows they return messages for, and return ``(rows_taken,
    publications)``; ``oldest_waiting()`` is when the oldest row waiting for a message was
    committed (``None`` when none waits): the relay's lag.

    Optional:

    - ``has_waiting()``: a cheap probe outside any transaction, so that an idle relay takes no
      lock (by default the claim always runs);
    - ``look_everywhere()``: an outbox whose look and claim read only where its new rows are,
      and elsewhere only between looks of its own, looks again at once (nothing by default);
    - held groups: rows may be held back in groups. ``held()`` names the groups held now (one
      cheap read per round; none by default), which ``claim``, ``sweep`` and
      ``oldest_waiting`` leave alone, and ``held_claim(group, limit)`` serves one of them in a
      transaction of its own, like a claim: it may set rows aside, or release them in order at
      the group's own pace. It is called for every held group in every round, by every relay;
      it decides under the group's own lock how much may go, so that several relays together
      keep that pace;
    - flow control (``flow_control = True``): ``unfinished(rows)`` returns, of the rows this
      relay published (``Publication.rows``), those no worker has finished with yet. A relay
      then keeps at most its in-flight limit of rows in flight, and claims again once half of
      them are done: while the workers keep up, every row goes at once; when they fall behind,
      new rows wait in the database, not in the broker, and the next claim takes them as full
      messages (a worker pays its per-message cost once per batch, not once per row)."""

    name: str = ""
    flow_control: bool = False

    def claim(self, limit: int) -> tuple[int, list[Publication]]:
        raise NotImplementedError

    def sweep(self, limit: int) -> tuple[int, list[Publication]]:
        raise NotImplementedError

    def oldest_waiting(self) -> datetime | None:
        raise NotImplementedError

    def has_waiting(self) -> bool:
        return True

    def look_everywhere(self) -> None:
        """The next look and claim find rows wherever they wait: an outbox that reads only
        where its new rows are between looks elsewhere (``webhooks.outbox.InboxOutbox``)
        looks again. A relay calls it in its first round and before every sweep."""

    def held(self) -> list[Group]:
        return []

    def held_claim(self, group: Group, limit: int) -> tuple[int, list[Publication]]:
        return 0, []

    def unfinished(self, rows: list[int]) -> set[int]:
        raise NotImplementedError(f"{type(self).__name__} has no flow control")

    def traceparents(self, publications: list[Publication]) -> list[tuple[str, ...]]:
        """Tracing only: per publication, the ``traceparent`` each of its rows keeps (the
        request that wrote it), read inside the relay's transaction; the publish span of
        its message links to them. None by default."""
        return [() for _ in publications]


_outboxes: dict[str, Outbox[Any]] = {}


def outbox_register(outbox: Outbox[Any]) -> None:
    _outboxes[outbox.name] = outbox


def outboxes() -> list[Outbox[Any]]:
    return list(_outboxes.values())


def outbox_lag_seconds(*, now: datetime | None = None) -> dict[str, float]:
    """Per outbox, how long its oldest waiting row has waited for a message (0 when none)."""
    now = now or timezone.now()
    lags = {}
    for outbox in outboxes():
        oldest = outbox.oldest_waiting()
        lags[outbox.name] = max((now - oldest).total_seconds(), 0.0) if oldest else 0.0
    return lags


def publish(
    publications: list[Publication],
    traceparents: list[tuple[str, ...]] | None = None,
) -> None:
    """Publishes the messages on one producer, in one batch of kombu's (``Producer.batch``):
    on Redis, one pipeline of every message's ``LPUSH``, sent once at the end; on a broker
    whose transport batches nothing (RabbitMQ), each message as it goes. Raises if the broker
    refuses one or the batch fails (kombu cannot then say which went: the caller rolls its
    stamps back and the rows are published again, which processing takes as a redelivery).
    docs/subsystems/relay.md, "A round". With ``traceparents`` (tracing), each message is
    sent within a publish span of its own, the root of a new trace linked to its rows'
    requests (docs/architecture.md, "A trace across the outbox")."""
    if not publications:
        return
    app = current_app
    with app.producer_or_acquire() as producer, producer.batch():
        for position, publication in enumerate(publications):
            bound = (
                correlation_id_bound(publication.correlation_id)
                if publication.correlation_id
                else contextlib.nullcontext()
            )
            if traceparents is not None:
                with bound, _publish_span(publication, traceparents[position]) as sent:
                    result = app.send_task(
                        publication.task, args=publication.args, producer=producer
                    )
                    sent.set_attribute("messaging.message.id", result.id)
                continue
            with bound:
                app.send_task(
                    publication.task, args=publication.args, producer=producer
                )


def _publish_span(publication: Publication, traceparents: tuple[str, ...]):
    destination = current_app.conf.task_default_queue
    attributes = messaging_attributes(operation="publish", destination=destination)
    attributes["celery.task_name"] = publication.task
    attributes["outbox.row_count"] = len(publication.rows) or 1
    return span(
        f"publish {destination}",
        kind="producer",
        attributes=attributes,
        links=traceparents,
        new_trace=True,
    )


def relay_round(
    outbox: Outbox,
    step: Callable[[int], tuple[int, list[Publication]]],
    limit: int,
    *,
    published: list[Publication] | None = None,
) -> int:
    """One claim (or sweep) of one outbox: lock and stamp, publish, commit. Returns the rows
    taken (and adds the messages to ``published`` once committed); a failed publish rolls the
    stamps back and raises."""
    with transaction.atomic():
        taken, publications = step(limit)
        if publications and tracing_enabled():
            publish(publications, outbox.traceparents(publications))
        else:
            publish(publications)
    if published is not None:
        published.extend(publications)
    return taken
