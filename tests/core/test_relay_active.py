"""One relay publishes at a time (docs/subsystems/relay.md, "One relay publishes at a time"): of
several relays on one PostgreSQL database, the one holding the active relay's lock runs the
rounds and the others stand by; a standby takes over when the active relay stops, loses its
lock's connection, or goes silent with the lock held."""

from __future__ import annotations

import logging
import threading

import psycopg
import pytest
from django.db import connection

from core.models import RelayHeartbeat
from core.relay.lock import ACTIVE_RELAY_LOCK_KEY, ActiveRelayLock
from core.relay.loop import ROLE_ACTIVE, ROLE_STAND_IN, ROLE_STANDBY, Relay
from tests import processes
from tests.broker import broker_reset, queued_inbox_event_ids
from tests.webhooks.factories import InboxEventFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def quick_relays(settings):
    settings.RELAY_STANDBY_POLL_SECONDS = 0.05
    # A standby stands in after three heartbeat periods with no active relay reporting: the
    # period must outlast how late a relay thread of this process reports on a loaded
    # machine (0.1 s let a standby stand in beside a live active relay at a load of 8).
    settings.RELAY_HEARTBEAT_SECONDS = 0.5
    settings.RELAY_IDLE_POLL_SECONDS = 0.01
    settings.RELAY_SWEEP_INTERVAL_SECONDS = 3600
    broker_reset()
    yield
    broker_reset()


class Running:
    """Relays looping in threads of the test, each on its own connections."""

    def __init__(self) -> None:
        self.relays: list[Relay] = []
        self.threads: list[threading.Thread] = []

    def start(self, **kwargs) -> Relay:
        relay = Relay(**kwargs)
        # Two relays of one process: the pid alone would name them alike.
        relay.relay_id = f"{relay.relay_id}:{len(self.relays)}"
        thread = threading.Thread(target=relay.run, daemon=True)
        self.relays.append(relay)
        self.threads.append(thread)
        thread.start()
        return relay

    def stop(self, relay: Relay) -> None:
        relay.stop.set()
        self.threads[self.relays.index(relay)].join(timeout=10)

    def stop_all(self) -> None:
        for relay in self.relays:
            relay.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)
        assert not any(thread.is_alive() for thread in self.threads)


@pytest.fixture
def running(quick_relays):
    relays = Running()
    yield relays
    relays.stop_all()


def roles(relays: list[Relay]) -> list[str]:
    return sorted(relay.role for relay in relays)


def wait_for_roles(relays: list[Relay], expected: list[str]) -> None:
    processes.wait_until(
        lambda: roles(relays) == sorted(expected),
        timeout=10,
        what=f"relays {expected}, now {roles(relays)}",
    )


def test_of_two_relays_one_publishes_and_the_other_stands_by(running):
    first, second = running.start(), running.start()
    wait_for_roles([first, second], [ROLE_ACTIVE, ROLE_STANDBY])
    active = first if first.role == ROLE_ACTIVE else second
    standby = second if active is first else first
    events = [InboxEventFactory() for _ in range(5)]
    # A round counts what it published after the broker has it: wait for the count too.
    processes.wait_until(
        lambda: (
            sorted(queued_inbox_event_ids()) == sorted(e.pk for e in events)
            and active.stats.published_rows == 5
        ),
        timeout=10,
        what="the active relay to publish the rows",
    )
    assert standby.stats.published_rows == 0
    assert standby.stats.rounds == 0  # a relay standing by runs no round at all
    processes.wait_until(
        lambda: (
            dict(RelayHeartbeat.objects.values_list("relay_id", "active"))
            == {active.relay_id: True, standby.relay_id: False}
        ),
        timeout=10,
        what="both heartbeats to say which relay publishes",
    )


def test_a_standby_takes_over_when_the_active_relay_stops(running):
    first, second = running.start(), running.start()
    wait_for_roles([first, second], [ROLE_ACTIVE, ROLE_STANDBY])
    active = first if first.role == ROLE_ACTIVE else second
    standby = second if active is first else first
    running.stop(active)  # gives the lock up
    processes.wait_until(
        lambda: standby.role == ROLE_ACTIVE, timeout=10, what="the standby to take over"
    )
    event = InboxEventFactory()
    processes.wait_until(
        lambda: queued_inbox_event_ids() == [event.pk],
        timeout=10,
        what="the new active relay to publish",
    )
    assert standby.stats.published_rows == 1


def _lock_holder_pid() -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = "
            "current_database()) AND ((classid::bigint << 32) | objid::bigint) = %s",
            [ACTIVE_RELAY_LOCK_KEY],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def test_a_relay_whose_lock_connection_ends_stands_by_and_another_takes_the_lock(
    running,
):
    """What a database restart does to the lock: its session ends. The relay that held it
    finds out at its next check and stands by; whichever relay takes the lock first then
    publishes, and only one does."""
    first, second = running.start(), running.start()
    wait_for_roles([first, second], [ROLE_ACTIVE, ROLE_STANDBY])
    holder = _lock_holder_pid()
    assert holder is not None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [holder])
    processes.wait_until(
        lambda: _lock_holder_pid() not in (None, holder),
        timeout=10,
        what="a relay to take the lock again",
    )
    wait_for_roles([first, second], [ROLE_ACTIVE, ROLE_STANDBY])
    event = InboxEventFactory()
    processes.wait_until(
        lambda: queued_inbox_event_ids() == [event.pk],
        timeout=10,
        what="the relay holding the lock to publish",
    )


@pytest.mark.slow
def test_a_standby_stands_in_for_an_active_relay_that_went_silent(
    running, caplog, settings
):
    """The lock held by a relay that reports nothing (its loop hung, say): after three
    heartbeat periods with no relay reporting itself active, the standby publishes; once an
    active relay reports again, it stands by again."""
    silent = psycopg.connect(
        **{
            k: v
            for k, v in connection.get_connection_params().items()
            if k != "cursor_factory"
        },
        autocommit=True,
    )
    try:
        assert silent.execute(
            "SELECT pg_try_advisory_lock(%s)", [ACTIVE_RELAY_LOCK_KEY]
        ).fetchone()[0]
        with caplog.at_level(logging.INFO, logger="core.relay"):
            relay = running.start()
            processes.wait_until(
                lambda: relay.role == ROLE_STANDBY, timeout=10, what="a standby"
            )
            event = InboxEventFactory()
            processes.wait_until(
                lambda: relay.role == ROLE_STAND_IN,
                timeout=10,
                what="the standby to stand in",
            )
            processes.wait_until(
                lambda: queued_inbox_event_ids() == [event.pk],
                timeout=10,
                what="the stand-in to publish",
            )
            # The holder of the lock reports again: the stand-in stands by.
            stop = threading.Event()

            def beat():
                while not stop.wait(settings.RELAY_HEARTBEAT_SECONDS / 2):
                    RelayHeartbeat.beat(relay_id="hung:1", published=0, active=True)

            beating = threading.Thread(target=beat, daemon=True)
            beating.start()
            try:
                processes.wait_until(
                    lambda: relay.role == ROLE_STANDBY,
                    timeout=10,
                    what="the stand-in to stand by again",
                )
            finally:
                stop.set()
                beating.join(timeout=10)
        messages = [record.getMessage() for record in caplog.records]
        stood_in = messages.index("relay.standing_in")
        assert "relay.standing_by" in messages[stood_in + 1 :]
    finally:
        silent.close()


def test_the_active_relay_keeps_in_flight_the_limit_of_every_worker_process_alive(
    quick_relays, settings
):
    settings.RELAY_IN_FLIGHT_LIMIT = 10
    RelayHeartbeat.beat(relay_id="other:1", published=0, active=False, processes=2)
    RelayHeartbeat.beat(relay_id="apart:1", published=0, active=False, processes=0)
    relay = Relay(processes=1)
    relay._lock = ActiveRelayLock(check_seconds=60)
    relay.role = ROLE_STANDBY
    relay.heartbeat()
    assert relay.in_flight_limit == 10  # standing by: its own worker's only
    relay.role = ROLE_ACTIVE
    assert relay.in_flight_limit == 30  # its own process and the other worker's two
    relay._lock = None  # no lock applies: every relay publishes for its own worker
    assert relay.in_flight_limit == 10
    assert Relay(in_flight_limit=7).in_flight_limit == 7
    assert Relay(processes=0).in_flight_limit == 10  # a relay apart from any worker


def test_with_one_active_turned_off_every_relay_publishes(running):
    first = running.start(one_active=False)
    second = running.start(one_active=False)
    assert roles([first, second]) == [ROLE_ACTIVE, ROLE_ACTIVE]
    events = [InboxEventFactory() for _ in range(40)]
    # A round counts what it published after the broker has it: wait for the counts too.
    processes.wait_until(
        lambda: (
            len(queued_inbox_event_ids()) == len(events)
            and first.stats.published_rows + second.stats.published_rows == len(events)
        ),
        timeout=10,
        what="the relays to publish every row",
    )
    assert _lock_holder_pid() is None
