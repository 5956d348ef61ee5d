"""The outbox relay itself (``core.relay``): every worker runs one, beat runs no sweep, and its
loop publishes what waits, keeps going when a round fails, and stops when told."""

import threading

import pytest
from django.utils import timezone

from config.celery_app import app
from core import relay as relay_module
from core.models import RelayHeartbeat
from core.relay import Outbox, Relay, RelayStep, RelayThread
from tests import processes
from tests.broker import broker_reset, queued_inbox_event_ids
from tests.webhooks.factories import InboxEventFactory
from webhooks.models import InboxEvent


def test_beat_runs_no_sweep_and_no_sweep_task_is_left():
    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert scheduled == {"audit.seal_inbox", "idempotency.cleanup"}
    assert "webhooks.sweep" not in app.tasks
    assert "deployments.sweep" not in app.tasks


def test_every_worker_runs_a_relay_unless_turned_off(settings):
    assert "core.relay:RelayStep" in app.steps["worker"]
    step = RelayStep.__new__(RelayStep)
    settings.RELAY_ENABLED = True
    assert step.include_if(worker=None)
    settings.RELAY_ENABLED = False
    assert not step.include_if(worker=None)


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
    monkeypatch.setattr(relay_module, "_outboxes", {"flaky": flaky})
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
    ``RELAY_BUSY_POLL_SECONDS`` that the rows are of ``RELAY_BUSY_FILL_ROWS``, the whole
    pause from there on (longer than the idle pause if so configured); nothing: the idle
    backoff."""
    settings.RELAY_HEARTBEAT_SECONDS = 3600
    settings.RELAY_BUSY_POLL_SECONDS = 0.04
    settings.RELAY_BUSY_FILL_ROWS = 8
    rounds = iter(
        [(5, True), (2, False), (8, False), (30, False), (0, False), (0, False)]
    )
    pauses: list[float] = []

    class Stop(threading.Event):
        def wait(self, timeout=None):
            pauses.append(timeout)
            if len(pauses) == 6:
                self.set()
            return self.is_set()

    relay = Relay(idle_poll_seconds=0.025)
    relay.stop = Stop()
    monkeypatch.setattr(relay, "run_once", lambda: next(rounds))
    relay.run()
    assert pauses == [0.0, 0.01, 0.04, 0.04, 0.025, 0.025]
