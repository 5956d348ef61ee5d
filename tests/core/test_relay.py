"""The outbox relay itself (``core.relay``): every worker runs one, beat runs no sweep, and its
loop publishes what waits, keeps going when a round fails, and stops when told."""

import itertools
import threading

import pytest
from django.utils import timezone
from kombu.exceptions import EncodeError

from config.celery_app import app
from core.models import RelayHeartbeat
from core.relay import outbox as outbox_module
from core.relay.loop import Relay, RelayStep, RelayThread
from core.relay.outbox import Outbox, Publication, publish
from tests import processes
from tests.broker import PROCESS_TASK, broker_reset, queued_inbox_event_ids
from tests.webhooks.factories import InboxEventFactory
from webhooks.models import InboxEvent


def test_beat_runs_no_sweep_and_no_sweep_task_is_left():
    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert scheduled == {
        "audit.inbox_figures",
        "audit.seal_inbox",
        "idempotency.cleanup",
        "webhooks.inbox_partitions",
    }
    assert "webhooks.sweep" not in app.tasks
    assert "deployments.sweep" not in app.tasks


def test_every_worker_runs_a_relay_unless_turned_off(settings):
    assert "core.relay.loop:RelayStep" in app.steps["worker"]
    step = RelayStep.__new__(RelayStep)
    settings.RELAY_ENABLED = True
    assert step.include_if(worker=None)
    settings.RELAY_ENABLED = False
    assert not step.include_if(worker=None)


def test_a_round_publishes_its_messages_in_one_batch_so_a_failed_one_sends_none():
    """On Redis a round's messages go in one pipeline, sent once they are all built: a
    round whose second message cannot be built leaves nothing in the queue (its rows roll back
    and go again in a later round), and a round that succeeds leaves them all, in order."""

    class NotJson:
        pass

    broker_reset()
    try:
        with pytest.raises(EncodeError):
            publish(
                [
                    Publication(task=PROCESS_TASK, args=[[1]]),
                    Publication(task=PROCESS_TASK, args=[[NotJson()]]),
                ]
            )
        assert queued_inbox_event_ids() == []
        publish([Publication(task=PROCESS_TASK, args=[[pk]]) for pk in (1, 2, 3)])
        assert queued_inbox_event_ids() == [1, 2, 3]
    finally:
        broker_reset()


@pytest.mark.django_db(transaction=True)
def test_the_relay_thread_publishes_what_waits_beats_and_stops(settings):
    settings.RELAY_HEARTBEAT_SECONDS = 0
    broker_reset()
    thread = RelayThread()
    thread.start()
    try:
        event = InboxEventFactory()
        processes.wait_until(
            lambda: queued_inbox_event_ids() == [event.pk],
            timeout=10,
            what="the relay thread to publish the new row",
        )
    finally:
        thread.stop()
        broker_reset()
    assert not thread.thread.is_alive()
    assert InboxEvent.objects.get(pk=event.pk).dispatched_at is not None
    heartbeat = RelayHeartbeat.objects.get(relay_id=thread.relay.relay_id)
    assert heartbeat.last_seen_at <= timezone.now()
    assert thread.relay.stats.published_rows >= 1


@pytest.mark.django_db(transaction=True)
def test_a_round_that_fails_is_counted_and_the_loop_goes_on(settings, monkeypatch):
    settings.RELAY_HEARTBEAT_SECONDS = 3600
    calls = {"claims": 0}
    recovered = threading.Event()

    class FlakyOutbox(Outbox):
        name = "flaky"

        def claim(self, limit):
            calls["claims"] += 1
            if calls["claims"] == 1:
                raise RuntimeError("the database went away")
            recovered.set()
            return 0, []

        def sweep(self, limit):
            return 0, []

        def oldest_waiting(self):
            return None

    flaky = FlakyOutbox()
    monkeypatch.setattr(outbox_module, "_outboxes", {"flaky": flaky})
    relay = Relay(idle_poll_seconds=0.01)
    runner = threading.Thread(target=relay.run, daemon=True)
    runner.start()
    try:
        assert recovered.wait(timeout=10), "the relay did not try again"
    finally:
        relay.stop.set()
        runner.join(timeout=10)
    assert not runner.is_alive()
    assert relay.stats.errors == 1
    assert relay.stats.last_error == "RuntimeError"
    assert relay.stats.rounds >= 1


@pytest.mark.django_db
def test_a_heartbeat_forgets_relays_silent_for_a_day_and_keeps_the_others():
    now = timezone.now()
    gone = RelayHeartbeat.objects.create(
        relay_id="host:1", last_seen_at=now - RelayHeartbeat.FORGET_AFTER * 2
    )
    quiet = RelayHeartbeat.objects.create(
        relay_id="host:2", last_seen_at=now - RelayHeartbeat.FORGET_AFTER / 2
    )
    RelayHeartbeat.beat(relay_id="host:3", published=5)
    assert set(RelayHeartbeat.objects.values_list("relay_id", flat=True)) == {
        quiet.relay_id,
        "host:3",
    }
    assert not RelayHeartbeat.objects.filter(pk=gone.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_after_a_round_that_took_rows_the_relay_waits_its_busy_pause(
    settings, monkeypatch
):
    """A full batch: the next round at once; rows but not a full batch: the share of
    ``RELAY_BUSY_POLL_SECONDS`` that the rate the relay took them at (rows over the time since
    its previous round began) is of the rate at which that pause collects
    ``RELAY_BUSY_FILL_ROWS`` rows, the whole pause from there on (longer than the idle pause
    if so configured); nothing: the idle backoff."""
    settings.RELAY_HEARTBEAT_SECONDS = 3600
    settings.RELAY_BUSY_POLL_SECONDS = 0.04
    settings.RELAY_BUSY_FILL_ROWS = 8  # the whole pause from 200 rows/s
    # (rows, full, seconds since the previous round began)
    plan = [
        (5, True, None),
        (2, False, 0.04),  # 2 rows in 40 ms: 50 rows/s
        (8, False, 0.04),  # 8 rows in 40 ms: 200 rows/s
        (30, False, 0.04),
        (2, False, 0.01),  # few rows, taken quickly: 200 rows/s
        (8, False, 0.16),  # many rows, taken slowly: 50 rows/s
        (0, False, 0.02),
        (0, False, 0.02),
    ]
    rounds = iter(plan)
    # When each round begins: the clock moves on while the relay waits.
    starts = itertools.accumulate(seconds for _, _, seconds in plan[1:])
    clock = [0.0]
    pauses: list[float] = []

    def run_once():
        taken, full, _ = next(rounds)
        return taken, full

    class Stop(threading.Event):
        def wait(self, timeout=None):
            pauses.append(timeout)
            if len(pauses) == len(plan):
                self.set()
            else:
                clock[0] = next(starts)
            return self.is_set()

    relay = Relay(idle_poll_seconds=0.025)
    relay.stop = Stop()
    monkeypatch.setattr(relay, "run_once", run_once)
    monkeypatch.setattr("core.relay.loop.time.monotonic", lambda: clock[0])
    relay.run()
    assert pauses == pytest.approx([0.0, 0.01, 0.04, 0.04, 0.04, 0.01, 0.02, 0.025])


def _rows_per_round(pause_of, *, arrivals: float, rounds: int = 250) -> float:
    """Two relays taking turns at the rows that arrive at ``arrivals`` per second, each
    round 2 ms long and followed by ``pause_of(taken, seconds since the relay's previous
    round began)`` (the idle pause when it took nothing): the mean rows per round that took
    rows, once settled."""
    last_taken = -0.01
    next_round = [0.0, 0.005]
    began: list[float | None] = [None, None]
    taken_by_round = []
    for _ in range(rounds):
        which = 0 if next_round[0] <= next_round[1] else 1
        now = next_round[which]
        taken = round(arrivals * (now - last_taken))
        if taken:
            last_taken = now
        previous = began[which]
        seconds = now - previous if previous is not None else None
        pause = pause_of(taken, seconds) if taken else 0.025
        began[which] = now
        next_round[which] = now + pause + 0.002
        taken_by_round.append(taken)
    settled = [taken for taken in taken_by_round[50:] if taken]
    return sum(settled) / len(settled)


def test_with_two_relays_sharing_the_rows_messages_stay_as_full_as_one_relays(
    settings,
):
    """Two relays share what arrives, each taking what came since the other's round. With
    the pause read from the rate each takes, their rounds fill as the load grows; with a
    pause read from the rows of one round (what the relay did before), each shorter round
    makes the next shorter, and at 300 rows/s its rounds took less than half as many rows."""
    settings.RELAY_BUSY_POLL_SECONDS = 0.1
    settings.RELAY_BUSY_FILL_ROWS = 20  # the whole pause from 200 rows/s per relay
    relay = Relay()

    def by_rate(taken, seconds):
        return relay.busy_pause(taken, seconds=seconds)

    def by_rows(taken, seconds):
        return 0.1 * min(taken / 20, 1.0)

    at_300 = _rows_per_round(by_rate, arrivals=300)
    assert at_300 >= 9
    assert _rows_per_round(by_rows, arrivals=300) < at_300 / 2
    assert _rows_per_round(by_rate, arrivals=400) >= 15
    # Under a light load the rounds stay short: a row or two each, tens of milliseconds apart.
    assert _rows_per_round(by_rate, arrivals=100) < 3
    assert relay.busy_pause(2, seconds=0.02) == pytest.approx(0.05)
