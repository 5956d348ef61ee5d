"""The inbox as an outbox (``webhooks.outbox``), served by the relay (``core.relay``) against
PostgreSQL and the real Redis broker: its claim publishes every row waiting for a message
once, in messages of at most ``INBOX_BATCH_SIZE`` ids; its sweep publishes again exactly the
rows whose message may be lost; relays, claims and sweeps racing never publish a row twice."""

from collections import Counter
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError

from core.relay.loop import Relay
from core.relay.outbox import outbox_lag_seconds, relay_round
from tests.broker import (
    broker_reset,
    inbox_messages,
    message_inbox_event_ids,
    queued_inbox_event_ids,
)
from tests.integrations.research.factories import research_event
from tests.outages import broker_unreachable
from tests.threads import run_together
from tests.webhooks.factories import InboxEventFactory, inbox_events_bulk_create
from webhooks.models import InboxEvent
from webhooks.outbox import INBOX_OUTBOX, inbox_sweep

pytestmark = pytest.mark.django_db(transaction=True)

TERMINAL = (
    "processed",
    "ignored_out_of_order",
    "ignored_duplicate_version",
    "ignored_unsupported",
    "dead_lettered",
)


@pytest.fixture(autouse=True)
def _clean_broker(settings):
    settings.INBOX_REDISPATCH_AFTER_SECONDS = 60
    broker_reset()
    yield
    broker_reset()


def claim(limit: int = 500) -> int:
    """One claim step of the inbox outbox, as a relay round runs it."""
    return relay_round(INBOX_OUTBOX, INBOX_OUTBOX.claim, limit)


def claim_until_empty(limit: int) -> list[int]:
    counts = []
    while count := claim(limit):
        counts.append(count)
    return counts


# --- claim --------------------------------------------------------------------------------


def test_the_claim_takes_new_rows_once_stamps_them_and_batches_them(settings):
    settings.INBOX_BATCH_SIZE = 4
    now = timezone.now()
    old = now - timedelta(minutes=5)
    new = [InboxEventFactory() for _ in range(10)]
    not_waiting = [
        InboxEventFactory(dispatched_at=now),  # its message is out
        InboxEventFactory(
            processing_status="processing",
            attempts=1,
            lease_expires_at=now + timedelta(minutes=5),
        ),
        InboxEventFactory(
            processing_status="failed",
            attempts=1,
            next_attempt_at=now + timedelta(minutes=5),
        ),
        *(
            InboxEventFactory(processing_status=status, processed_at=old)
            for status in TERMINAL
        ),
    ]

    assert claim() == 10

    messages = inbox_messages()
    assert {m["task"] for m in messages} == {"webhooks.process_inbox_events"}
    assert [message_inbox_event_ids(m) for m in messages] == [
        [e.pk for e in new[0:4]],
        [e.pk for e in new[4:8]],
        [e.pk for e in new[8:10]],
    ]
    for event in new:
        event.refresh_from_db()
        assert event.dispatched_at >= now
        assert event.processing_status == "received"  # the worker's claim changes that
    for event in not_waiting:
        before = event.dispatched_at
        event.refresh_from_db()
        assert event.dispatched_at == before
    # Stamped: a second round takes nothing and publishes nothing.
    assert claim() == 0
    assert Relay().run_once(sweep=False) == (0, False)
    assert len(queued_inbox_event_ids()) == 10


def test_the_claim_takes_retries_once_they_come_due():
    now = timezone.now()
    due = InboxEventFactory(
        processing_status="failed",
        attempts=1,
        next_attempt_at=now - timedelta(seconds=1),
    )
    later = InboxEventFactory(
        processing_status="failed",
        attempts=1,
        next_attempt_at=now + timedelta(minutes=5),
    )
    assert INBOX_OUTBOX.has_waiting()

    assert claim() == 1
    assert queued_inbox_event_ids() == [due.pk]
    assert claim() == 0
    assert not INBOX_OUTBOX.has_waiting()

    InboxEvent.objects.filter(pk=later.pk).update(
        next_attempt_at=timezone.now() - timedelta(seconds=1)
    )
    assert INBOX_OUTBOX.has_waiting()
    assert claim() == 1
    assert queued_inbox_event_ids() == [due.pk, later.pk]


def test_new_rows_go_first_and_a_round_takes_at_most_its_limit():
    due_retry = InboxEventFactory(
        processing_status="failed",
        attempts=1,
        next_attempt_at=timezone.now() - timedelta(seconds=1),
    )
    new = inbox_events_bulk_create([research_event() for _ in range(7)])
    relay = Relay(batch_limit=5)

    assert relay.run_once(sweep=False) == (5, True)  # full: go again at once
    assert relay.run_once(sweep=False) == (3, False)
    assert relay.run_once(sweep=False) == (0, False)
    assert queued_inbox_event_ids() == [*(r.pk for r in new), due_retry.pk]


def test_the_waiting_rows_are_the_relays_lag():
    assert INBOX_OUTBOX.oldest_waiting() is None
    assert outbox_lag_seconds()["inbox"] == 0.0
    now = timezone.now()
    first = InboxEventFactory(received_at=now - timedelta(seconds=40))
    InboxEventFactory(received_at=now - timedelta(seconds=10))

    assert INBOX_OUTBOX.oldest_waiting() == first.received_at
    assert 39 <= outbox_lag_seconds(now=now)["inbox"] <= 41

    claim()
    assert INBOX_OUTBOX.oldest_waiting() is None
    assert outbox_lag_seconds()["inbox"] == 0.0


def test_a_publish_that_fails_rolls_the_stamps_back_and_the_next_round_publishes():
    rows = [InboxEventFactory() for _ in range(3)]

    with broker_unreachable(), pytest.raises(OperationalError):
        claim()

    assert InboxEvent.objects.filter(dispatched_at__isnull=True).count() == 3
    assert INBOX_OUTBOX.has_waiting()
    assert claim() == 3
    assert queued_inbox_event_ids() == [r.pk for r in rows]


def test_three_relays_racing_publish_each_row_exactly_once():
    rows = inbox_events_bulk_create([research_event() for _ in range(400)])

    def relay_until_empty() -> int:
        relay, taken = Relay(batch_limit=20, in_flight_limit=0), 0
        while True:
            count, _ = relay.run_once(sweep=False)
            if not count:
                return taken
            taken += count

    taken, errors = run_together([relay_until_empty] * 3)

    assert not errors, errors
    assert sum(taken) == 400
    queued = Counter(queued_inbox_event_ids())
    assert set(queued) == {r.pk for r in rows}
    assert max(queued.values()) == 1
    assert all(len(message_inbox_event_ids(m)) <= 50 for m in inbox_messages())
    assert not InboxEvent.objects.filter(dispatched_at__isnull=True).exists()


def test_claims_and_sweeps_racing_on_rows_both_would_take_publish_each_once():
    """Rows received long ago and never published are the claim's and the sweep's: relays
    claiming and sweeping at once still publish each row once."""
    old = timezone.now() - timedelta(minutes=5)
    rows = inbox_events_bulk_create(
        [research_event() for _ in range(300)], received_at=old
    )

    taken, errors = run_together(
        [
            lambda: sum(claim_until_empty(15)),
            lambda: inbox_sweep(limit=15),
            lambda: sum(claim_until_empty(25)),
            lambda: inbox_sweep(limit=25),
        ]
    )

    assert not errors, errors
    assert sum(taken) == 300
    queued = Counter(queued_inbox_event_ids())
    assert set(queued) == {r.pk for r in rows}
    assert max(queued.values()) == 1


# --- sweep --------------------------------------------------------------------------------


def test_the_sweeps_messages_ask_for_claims_the_claims_do_not():
    """A row the sweep publishes may have lost its message with a worker that died running
    it: its message asks the worker to claim it before running it (``again``)."""
    old = timezone.now() - timedelta(minutes=5)
    swept = InboxEventFactory(received_at=old, dispatched_at=old)
    new = InboxEventFactory()
    with transaction.atomic():
        assert INBOX_OUTBOX.claim(10)[1][0].args == [[new.pk]]
    with transaction.atomic():
        assert INBOX_OUTBOX.sweep(10)[1][0].args == [[swept.pk], True]


def test_sweep_redispatches_exactly_the_rows_whose_message_may_be_lost():
    now = timezone.now()
    old, fresh = now - timedelta(seconds=120), now - timedelta(seconds=5)
    due = {
        "received_old": InboxEventFactory(received_at=old),
        "received_old_dispatched_before_half_its_age": InboxEventFactory(
            received_at=now - timedelta(minutes=20),
            dispatched_at=now - timedelta(minutes=11),
        ),
        "failed_due": InboxEventFactory(
            processing_status="failed",
            attempts=1,
            next_attempt_at=now - timedelta(seconds=1),
        ),
        "failed_due_retry_published_long_ago": InboxEventFactory(
            processing_status="failed",
            attempts=1,
            next_attempt_at=now - timedelta(seconds=1),
            dispatched_at=old,
        ),
        "lease_expired": InboxEventFactory(
            processing_status="processing",
            attempts=1,
            lease_expires_at=now - timedelta(seconds=1),
            dispatched_at=old,
        ),
    }
    not_due = {
        "received_fresh": InboxEventFactory(received_at=fresh),
        "received_old_dispatched_recently": InboxEventFactory(
            received_at=old, dispatched_at=fresh
        ),
        # Waiting in a long queue, most likely: re-dispatches are spaced by half its age.
        "received_old_dispatched_after_half_its_age": InboxEventFactory(
            received_at=now - timedelta(minutes=20),
            dispatched_at=now - timedelta(minutes=9),
        ),
        "failed_later": InboxEventFactory(
            processing_status="failed",
            attempts=1,
            next_attempt_at=now + timedelta(seconds=30),
        ),
        "failed_due_retry_already_published": InboxEventFactory(
            processing_status="failed",
            attempts=1,
            next_attempt_at=now - timedelta(seconds=1),
            dispatched_at=now - timedelta(seconds=1),
        ),
        "lease_live": InboxEventFactory(
            processing_status="processing",
            attempts=1,
            lease_expires_at=now + timedelta(seconds=60),
        ),
        **{
            status: InboxEventFactory(
                processing_status=status, received_at=old, processed_at=old
            )
            for status in TERMINAL
        },
    }

    assert inbox_sweep() == len(due)

    assert sorted(queued_inbox_event_ids()) == sorted(e.pk for e in due.values())
    for event in due.values():
        event.refresh_from_db()
        assert event.dispatched_at >= now
    for name, event in not_due.items():
        before = event.dispatched_at
        event.refresh_from_db()
        assert event.dispatched_at == before, name
    # Stamped: the next sweep finds nothing until INBOX_REDISPATCH_AFTER_SECONDS pass.
    assert inbox_sweep() == 0
    assert len(queued_inbox_event_ids()) == len(due)


def test_a_relay_round_sweeps_when_asked_or_when_its_interval_has_passed():
    long_ago = timezone.now() - timedelta(minutes=5)

    def lose_the_message(event):
        InboxEvent.objects.filter(pk=event.pk).update(dispatched_at=long_ago)

    event = InboxEventFactory(received_at=long_ago - timedelta(minutes=5))
    lose_the_message(event)
    relay = Relay(sweep_interval_seconds=3600)

    assert relay.run_once(sweep=False) == (
        0,
        False,
    )  # not the claim's: its message is out
    assert queued_inbox_event_ids() == []
    assert relay.run_once(sweep=True) == (1, False)
    assert queued_inbox_event_ids() == [event.pk]

    lose_the_message(event)
    assert relay.run_once() == (0, False)  # swept less than an interval ago
    assert Relay(sweep_interval_seconds=0).run_once() == (1, False)
    assert queued_inbox_event_ids() == [event.pk, event.pk]

    # A relay that just started sweeps in its first round, however long its interval and
    # however recently the machine booted: what a crash left behind goes out at once.
    lose_the_message(event)
    assert Relay(sweep_interval_seconds=10**9).run_once() == (1, False)
    assert queued_inbox_event_ids() == [event.pk, event.pk, event.pk]


def test_a_sweep_takes_every_due_row_in_bounded_batches():
    old = timezone.now() - timedelta(minutes=5)
    rows = inbox_events_bulk_create(
        [research_event() for _ in range(23)], received_at=old, dispatched_at=old
    )
    assert inbox_sweep(limit=5) == 23
    # Each batch of 5 was claimed, stamped and published in its own transaction.
    assert [len(message_inbox_event_ids(m)) for m in inbox_messages()] == [
        5,
        5,
        5,
        5,
        3,
    ]
    assert sorted(queued_inbox_event_ids()) == sorted(r.pk for r in rows)
    assert inbox_sweep(limit=5) == 0


def test_a_relay_whose_sweep_comes_back_full_goes_on_sweeping_at_once():
    """Many messages lost at once (a broker that lost its data): the relay does not wait for
    its next interval to publish the rest, and claims new rows between sweep batches."""
    old = timezone.now() - timedelta(minutes=5)
    inbox_events_bulk_create(
        [research_event() for _ in range(12)], received_at=old, dispatched_at=old
    )
    relay = Relay(batch_limit=5, sweep_interval_seconds=3600)

    assert relay.run_once(sweep=True) == (5, True)  # full: the next round at once
    new = InboxEventFactory()
    assert relay.run_once() == (6, True)  # the new row, and the sweep goes on
    assert queued_inbox_event_ids()[5] == new.pk
    assert relay.run_once() == (2, False)
    assert relay.run_once() == (0, False)  # done: the next sweep waits for its interval
    assert len(queued_inbox_event_ids()) == 13


def test_three_sweeps_at_once_never_double_dispatch():
    old = timezone.now() - timedelta(minutes=5)
    rows = inbox_events_bulk_create(
        [research_event() for _ in range(400)], received_at=old, dispatched_at=old
    )
    published, errors = run_together([lambda: inbox_sweep(limit=20)] * 3)

    assert not errors, errors
    assert sum(published) == 400
    queued = Counter(queued_inbox_event_ids())
    assert set(queued) == {r.pk for r in rows}
    assert max(queued.values()) == 1
    assert not InboxEvent.objects.filter(dispatched_at__lt=old).exists()


# --- flow control -------------------------------------------------------------------------


def finish(rows, status: str = "processed") -> None:
    InboxEvent.objects.filter(pk__in=[r.pk for r in rows]).update(
        processing_status=status, processed_at=timezone.now()
    )


def test_a_relay_keeps_at_most_its_in_flight_limit_and_then_publishes_full_messages(
    settings,
):
    """Workers that fall behind: new rows wait in the database, not in the broker, and go
    out as full messages once half of what is in flight is finished."""
    settings.INBOX_BATCH_SIZE = 10
    rows = inbox_events_bulk_create([research_event() for _ in range(100)])
    relay = Relay(batch_limit=500, in_flight_limit=20)

    assert relay.run_once(sweep=False) == (20, True)
    assert relay.in_flight(INBOX_OUTBOX) == 20
    assert relay.run_once(sweep=False) == (0, False)  # nothing finished: nothing goes
    finish(rows[:5])
    assert relay.run_once(sweep=False) == (0, False)  # 15 in flight: no room for half
    finish(rows[5:10])
    assert relay.run_once(sweep=False) == (
        10,
        True,
    )  # 10 in flight: 10 more, one message

    sizes = [len(message_inbox_event_ids(m)) for m in inbox_messages()]
    assert sizes == [10, 10, 10]
    assert queued_inbox_event_ids() == [r.pk for r in rows[:30]]
    # What waits is the relay's lag, as it is for any row without a message.
    assert outbox_lag_seconds()["inbox"] >= 0
    assert (
        InboxEvent.objects.filter(dispatched_at__isnull=True).count() == 70
    )  # and nothing was lost: it waits for its turn


def test_rows_a_worker_failed_or_found_paused_are_no_longer_in_flight(settings):
    """A failed attempt and a row held back by a pause clear ``dispatched_at``: their message
    is done with, and the room it took is free again."""
    settings.INBOX_BATCH_SIZE = 10
    rows = inbox_events_bulk_create([research_event() for _ in range(40)])
    relay = Relay(batch_limit=500, in_flight_limit=20)
    assert relay.run_once(sweep=False) == (20, True)

    InboxEvent.objects.filter(pk__in=[r.pk for r in rows[:10]]).update(
        processing_status="failed",
        attempts=1,
        dispatched_at=None,
        next_attempt_at=timezone.now() + timedelta(minutes=5),
    )
    assert relay.run_once(sweep=False) == (10, True)
    assert relay.in_flight(INBOX_OUTBOX) == 20


def test_a_row_in_flight_too_long_stops_counting(settings, monkeypatch):
    """A lost message is the sweep's business: its rows stop holding the relay back."""
    import core.relay.loop

    settings.INBOX_BATCH_SIZE = 10
    inbox_events_bulk_create([research_event() for _ in range(40)])
    relay = Relay(batch_limit=500, in_flight_limit=20)
    assert relay.run_once(sweep=False) == (20, True)
    assert relay.run_once(sweep=False) == (0, False)

    monkeypatch.setattr(core.relay.loop, "IN_FLIGHT_FORGET_SECONDS", 0.0)
    assert relay.run_once(sweep=False) == (20, True)


def test_without_flow_control_a_relay_publishes_whatever_waits(settings):
    settings.INBOX_BATCH_SIZE = 10
    inbox_events_bulk_create([research_event() for _ in range(60)])
    assert Relay(batch_limit=500, in_flight_limit=0).run_once(sweep=False) == (
        60,
        False,
    )
    assert len(inbox_messages()) == 6
