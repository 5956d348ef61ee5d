"""The relay's loop (docs/subsystems/relay.md, "A round" and "Flow control"): ``Relay`` runs
the rounds over every registered outbox, holds or waits for the active relay's lock, keeps
its in-flight rows under the limit and paces its polls; ``RelayStep`` runs one in every
Celery worker, in a thread of the worker's main process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from celery import bootsteps, signals
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from ..tracing import tracing_shutdown, tracing_start
from .lock import ActiveRelayLock, active_relay_lock_supported
from .outbox import Outbox, Publication, outboxes, relay_round

# The name the relay has always logged under, whatever module of the package logs.
logger = logging.getLogger("core.relay")

# Under flow control, a published row stops counting as in flight after this long.
IN_FLIGHT_FORGET_SECONDS = 60.0

# What a relay does (``Relay.role``): publishes (it holds the active relay's lock, or no such
# lock applies); stands by, trying to take the lock; stands in for an active relay that went
# silent, publishing beside whichever relay holds the lock.
ROLE_ACTIVE = "active"
ROLE_STANDBY = "standby"
ROLE_STAND_IN = "stand_in"


@dataclass
class RelayStats:
    rounds: int = 0
    published_rows: int = 0
    errors: int = 0
    last_error: str = ""


class Relay:
    """The loop of one relay. ``run_once`` is one round over every outbox; ``run`` loops until
    ``stop`` is set."""

    def __init__(
        self,
        *,
        batch_limit: int | None = None,
        idle_poll_seconds: float | None = None,
        sweep_interval_seconds: float | None = None,
        in_flight_limit: int | None = None,
        processes: int = 1,
        one_active: bool | None = None,
    ):
        self.batch_limit = batch_limit or settings.RELAY_BATCH_LIMIT
        # The processes of this relay's worker's pool (0: a relay apart from any worker).
        self.processes = processes
        # Given: the limit in all, whatever the relay serves; otherwise RELAY_IN_FLIGHT_LIMIT
        # per worker process it publishes for (``in_flight_limit``).
        self._in_flight_limit_given = in_flight_limit
        # The worker processes of every relay seen alive at the last heartbeat, this one's
        # included: what the active relay publishes for.
        self._processes_alive = processes
        # One relay publishes at a time (``run``), unless turned off or not on PostgreSQL.
        self.one_active = (
            settings.RELAY_ONE_ACTIVE if one_active is None else one_active
        )
        self.standby_poll_seconds = settings.RELAY_STANDBY_POLL_SECONDS
        self.role = ROLE_ACTIVE
        self._lock: ActiveRelayLock | None = None
        self._standby_since: float | None = None
        # Per outbox with flow control: the rows this relay published and not yet seen
        # finished, with when they went (``time.monotonic()``).
        self._in_flight: dict[str, dict[int, float]] = {}
        self.idle_poll_seconds = (
            idle_poll_seconds
            if idle_poll_seconds is not None
            else settings.RELAY_IDLE_POLL_SECONDS
        )
        self.busy_poll_seconds = settings.RELAY_BUSY_POLL_SECONDS
        # Rows per second at which the whole busy pause collects RELAY_BUSY_FILL_ROWS rows.
        self.busy_fill_rate = max(settings.RELAY_BUSY_FILL_ROWS, 1) / max(
            self.busy_poll_seconds, 0.001
        )
        self.sweep_interval_seconds = (
            sweep_interval_seconds
            if sweep_interval_seconds is not None
            else settings.RELAY_SWEEP_INTERVAL_SECONDS
        )
        self.stop = threading.Event()
        self.stats = RelayStats()
        self.relay_id = f"{socket.gethostname()}:{os.getpid()}"
        self._last_sweep: float | None = None  # never: the first round sweeps
        # Outboxes whose last sweep batch came back full: their sweep goes on next round.
        self._sweep_unfinished: set[str] = set()
        self._last_heartbeat: float | None = None  # None: beat in the next turn

    def run_once(self, *, sweep: bool | None = None) -> tuple[int, bool]:
        """One round: new rows of every outbox, and a batch of the sweep when it is due (or
        asked, or unfinished); ``sweep=False`` sweeps nothing. Returns the rows taken and
        whether a batch came back full."""
        now = time.monotonic()
        due = sweep
        if sweep is None:
            due = (
                self._last_sweep is None
                or now - self._last_sweep >= self.sweep_interval_seconds
            )
        taken, full = 0, False
        for outbox in outboxes():
            if due or self.stats.rounds == 0:
                outbox.look_everywhere()
            if outbox.has_waiting():
                limit = self._claim_limit(outbox)
                if limit:
                    published: list[Publication] = []
                    count = relay_round(
                        outbox, outbox.claim, limit, published=published
                    )
                    self._in_flight_add(outbox, published)
                    taken += count
                    full = full or count >= limit
            for group in outbox.held():
                count = relay_round(
                    outbox,
                    functools.partial(outbox.held_claim, group),
                    self.batch_limit,
                )
                taken += count
                full = full or count >= self.batch_limit
            if due or (sweep is None and outbox.name in self._sweep_unfinished):
                count = relay_round(outbox, outbox.sweep, self.batch_limit)
                taken += count
                if count >= self.batch_limit:
                    self._sweep_unfinished.add(outbox.name)
                    full = True
                else:
                    self._sweep_unfinished.discard(outbox.name)
        if due:
            self._last_sweep = now
        self.stats.rounds += 1
        self.stats.published_rows += taken
        return taken, full

    @property
    def in_flight_limit(self) -> int:
        """Inbox rows this relay keeps in flight: the limit it was given, or
        ``RELAY_IN_FLIGHT_LIMIT`` per worker process it publishes for. The active relay of
        several publishes for every worker seen alive; any other relay for its own."""
        if self._in_flight_limit_given is not None:
            return self._in_flight_limit_given
        processes = self.processes
        if self._lock is not None and self.role == ROLE_ACTIVE:
            processes = max(self._processes_alive, processes)
        return settings.RELAY_IN_FLIGHT_LIMIT * max(processes, 1)

    def in_flight(self, outbox: Outbox) -> int:
        """The rows of ``outbox`` this relay published and has not seen finished yet."""
        return len(self._in_flight.get(outbox.name, ()))

    def _claim_limit(self, outbox: Outbox) -> int:
        """How many rows this round's claim may take: ``batch_limit``, or under flow control
        what the in-flight limit leaves, and nothing until half of it is free again (so that
        a relay whose workers fall behind waits for room for full messages). What is in flight
        is read again from the database only once half the limit is reached; a row published
        more than ``IN_FLIGHT_FORGET_SECONDS`` ago no longer counts: a lost message is the
        sweep's business, not a reason to stop publishing."""
        if not outbox.flow_control or self.in_flight_limit <= 0:
            return self.batch_limit
        rows = self._in_flight.setdefault(outbox.name, {})
        half = max(self.in_flight_limit // 2, 1)
        if len(rows) >= half:
            recent = time.monotonic() - IN_FLIGHT_FORGET_SECONDS
            pending = outbox.unfinished([pk for pk, at in rows.items() if at >= recent])
            rows = {pk: at for pk, at in rows.items() if pk in pending}
            self._in_flight[outbox.name] = rows
        room = self.in_flight_limit - len(rows)
        if room < half:
            return 0
        return min(self.batch_limit, room)

    def _in_flight_add(self, outbox: Outbox, published: list[Publication]) -> None:
        if not outbox.flow_control or self.in_flight_limit <= 0:
            return
        rows = self._in_flight.setdefault(outbox.name, {})
        now = time.monotonic()
        for publication in published:
            rows.update(dict.fromkeys(publication.rows, now))

    def busy_pause(self, taken: int, *, seconds: float | None = None) -> float:
        """The pause after a round that took ``taken`` rows, not a full batch, ``seconds``
        after this relay's previous round began: in proportion to the rate at which this
        relay takes rows, the whole ``RELAY_BUSY_POLL_SECONDS`` from the rate at which that
        pause collects ``RELAY_BUSY_FILL_ROWS`` rows (``busy_fill_rate``).

        A relay that takes rows slowly (a light load) goes on within milliseconds, and one
        that takes them fast (a busy system) waits the whole pause, its next message fuller
        for it. The rate, not the rows of one round, decides: several relays share what
        arrives, each taking a part of it in each round, and a pause read from that part
        would shrink with every relay added (with two relays at 400 rows/s in all, each
        round took fewer rows and waited less, until messages were a few rows each). The
        rate each relay takes is its share of the arrivals whatever the pauses are, so the
        pause settles where it should."""
        if seconds is None or seconds <= 0:
            seconds = self.busy_poll_seconds
        rate = taken / seconds
        return self.busy_poll_seconds * min(rate / self.busy_fill_rate, 1.0)

    def heartbeat(self) -> None:
        """Reports this relay alive (and whether it publishes), then reads the others'
        reports: the worker processes the active relay publishes for, and, for a relay
        standing by, whether the active one went silent (``_role_from_heartbeats``)."""
        from ..models import RelayHeartbeat

        RelayHeartbeat.beat(
            relay_id=self.relay_id,
            published=self.stats.published_rows,
            active=self.role == ROLE_ACTIVE,
            processes=self.processes,
        )
        horizon = timezone.now() - timedelta(
            seconds=3 * settings.RELAY_HEARTBEAT_SECONDS
        )
        others = list(
            RelayHeartbeat.objects.filter(last_seen_at__gte=horizon)
            .exclude(relay_id=self.relay_id)
            .values_list("active", "processes")
        )
        self._processes_alive = self.processes + sum(n for _, n in others)
        self._role_from_heartbeats(any(active for active, _ in others))

    def _role_from_heartbeats(self, other_active: bool) -> None:
        """A relay standing by stands in for an active relay that stopped reporting (its
        loop hung with the lock held, or its machine went away and the database has not
        noticed yet): after three heartbeat periods with no relay reporting itself active, it
        publishes as every relay did before one was made the active one; it stands by again
        once an active relay reports."""
        if self.role == ROLE_STANDBY and not other_active:
            silent_for = time.monotonic() - (self._standby_since or time.monotonic())
            if silent_for >= 3 * settings.RELAY_HEARTBEAT_SECONDS:
                self.role = ROLE_STAND_IN
                logger.warning("relay.standing_in", extra={"relay": self.relay_id})
        elif self.role == ROLE_STAND_IN and other_active:
            self.role = ROLE_STANDBY
            self._standby_since = time.monotonic()
            logger.info("relay.standing_by", extra={"relay": self.relay_id})

    def _role_update(self) -> None:
        """Takes (or keeps) the active relay's lock when that is due: the relay that holds
        it publishes; another stands by, or stands in (``_role_from_heartbeats``)."""
        if self._lock is None:
            return
        if self._lock.hold():
            if self.role != ROLE_ACTIVE:
                self.role = ROLE_ACTIVE
                self._last_heartbeat = None  # say so at once
                logger.info("relay.active", extra={"relay": self.relay_id})
            return
        if self.role == ROLE_ACTIVE:
            self.role = ROLE_STANDBY
            self._standby_since = time.monotonic()
            self._last_heartbeat = None
            self._in_flight.clear()  # what it published is the active relay's now
            logger.info("relay.standing_by", extra={"relay": self.relay_id})

    def run(self) -> None:
        """Rounds until ``stop`` is set. On PostgreSQL, with ``RELAY_ONE_ACTIVE``, only the
        relay holding the active relay's lock runs them (docs/subsystems/relay.md, "One relay
        publishes at a time"); the others stand by, trying to take the lock every
        ``RELAY_STANDBY_POLL_SECONDS``."""
        pause = 0.0
        backoff = 0.5
        previous: float | None = None  # when the last round began
        if self.one_active and active_relay_lock_supported():
            self._lock = ActiveRelayLock(check_seconds=self.standby_poll_seconds)
            self.role = ROLE_STANDBY
            self._standby_since = time.monotonic()
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    pause = self._turn(pause, since_previous=previous, started=started)
                    backoff = 0.5
                except Exception as exc:
                    # The database or the broker is away: wait, then try again.
                    self.stats.errors += 1
                    self.stats.last_error = type(exc).__name__
                    logger.warning(
                        "relay.round_failed",
                        extra={"relay": self.relay_id, "error": type(exc).__name__},
                        exc_info=True,
                    )
                    with contextlib.suppress(Exception):
                        connection.close()
                    pause = backoff
                    backoff = min(backoff * 2, 10.0)
                previous = started if self.role != ROLE_STANDBY else None
                self.stop.wait(pause)
        finally:
            if self._lock is not None:
                self._lock.release()  # a relay standing by takes over at its next try
            with contextlib.suppress(Exception):
                connection.close()

    def _turn(
        self, pause: float, *, since_previous: float | None, started: float
    ) -> float:
        """One turn of the loop: the role, the heartbeat when due, and a round unless the
        relay stands by. Returns the pause before the next turn."""
        close_old_connections()
        self._role_update()
        last = self._last_heartbeat
        if last is None or time.monotonic() - last >= settings.RELAY_HEARTBEAT_SECONDS:
            self.heartbeat()
            self._last_heartbeat = time.monotonic()
        if self.role == ROLE_STANDBY:
            return self.standby_poll_seconds
        taken, full = self.run_once()
        if full:
            return 0.0
        if taken:
            seconds = started - since_previous if since_previous is not None else None
            return self.busy_pause(taken, seconds=seconds)
        # Idle: back off towards the idle poll.
        return min(max(pause * 2, 0.002), self.idle_poll_seconds)


class RelayThread:
    """A relay in a daemon thread of the worker's main process. Its in-flight limit is
    ``RELAY_IN_FLIGHT_LIMIT`` per process of the worker's pool (of every worker seen alive
    while it is the active relay)."""

    def __init__(self, *, concurrency: int = 1) -> None:
        self.relay = Relay(processes=max(concurrency, 1))
        self.thread = threading.Thread(
            target=self._run, name="outbox-relay", daemon=True
        )

    def _run(self) -> None:
        logger.info("relay.started", extra={"relay": self.relay.relay_id})
        self.relay.run()
        logger.info("relay.stopped", extra={"relay": self.relay.relay_id})

    def start(self) -> None:
        # The relay's publish spans: the worker's main process traces too (after the
        # pool's fork: the Pool step comes first), without psycopg's spans of every probe.
        tracing_start(process="relay")
        self.thread.start()

    def stop(self) -> None:
        self.relay.stop.set()
        self.thread.join(timeout=10)
        tracing_shutdown()


class RelayStep(bootsteps.StartStopStep):
    """Runs a relay in every Celery worker (``celery -A config worker``), unless
    ``RELAY_ENABLED`` is off for that worker."""

    requires = ("celery.worker.components:Pool",)

    def include_if(self, worker):
        return settings.RELAY_ENABLED

    def create(self, worker):
        thread = RelayThread(concurrency=worker.concurrency or 1)

        # Told as soon as the worker is asked to stop (its signal handler), not when the
        # worker's steps stop in turn after the consumer's: the relay's round ends while the
        # consumer finishes, and a stopping worker publishes nothing new.
        def _stop_now(**kwargs):
            thread.relay.stop.set()

        signals.worker_shutting_down.connect(_stop_now, weak=False)
        return thread
