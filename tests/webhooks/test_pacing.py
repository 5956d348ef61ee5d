"""The schedule of a bulk replay job at a rate (``webhooks.pacing``), on a simulated clock:
slice sizes, due times that do not drift when every task runs a little late, no burst at the
start nor after a stall, the measured rate and the estimated end."""

from datetime import UTC, datetime, timedelta

import pytest

from webhooks.pacing import (
    Pace,
    finish_estimate,
    measured_rate,
    next_slice_due,
    pace_for,
    slice_start,
)

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def seconds(when: datetime) -> float:
    return (when - T0).total_seconds()


def simulate(total, pace, *, late=lambda i: 0.0, took=0.0):
    """Runs a job of ``total`` events as its chain of tasks would: task ``i`` runs
    ``late(i)`` seconds after its due time and its slice takes ``took`` seconds. Returns the
    (time in seconds, events) of each slice."""
    slices = []
    due = None
    now = 0.0
    remaining = total
    i = 0
    while remaining:
        start = slice_start(
            due=None if due is None else at(due), now=at(now), pace=pace
        )
        count = min(pace.size, remaining)
        slices.append((now, count))
        remaining -= count
        due = seconds(next_slice_due(start=start, replayed=count, pace=pace))
        i += 1
        now = max(due, now + took) + late(i)
    return slices


def rate_of(slices):
    """Events per second from the first slice to the last, the first slice's events not
    counted (they took no time): how the job measures itself."""
    (first_time, first_count), (last_time, _) = slices[0], slices[-1]
    return (sum(count for _, count in slices) - first_count) / (last_time - first_time)


def most_in_any_window(slices, window):
    return max(
        sum(count for t, count in slices if start <= t < start + window)
        for start, _ in slices
    )


@pytest.mark.parametrize(
    ("rate", "tick", "size", "interval"),
    [
        (20, 0.5, 10, 0.5),
        (3, 0.5, 1, 1 / 3),
        (1.5, 0.5, 1, 1 / 1.5),
        (0.01, 0.5, 1, 100.0),
        (10_000, 0.5, 5_000, 0.5),
        (7, 1.0, 7, 1.0),
    ],
)
def test_a_slice_holds_about_one_tick_of_events_and_at_least_one(
    rate, tick, size, interval
):
    pace = pace_for(rate=rate, tick=tick)
    assert pace.size == size
    assert pace.interval == pytest.approx(interval)


def test_on_time_slices_follow_the_schedule_exactly():
    pace = pace_for(rate=20, tick=0.5)
    assert simulate(60, pace) == [
        (0.0, 10),
        (0.5, 10),
        (1.0, 10),
        (1.5, 10),
        (2.0, 10),
        (2.5, 10),
    ]


def test_tasks_that_all_run_late_keep_their_places_no_drift():
    pace = pace_for(rate=20, tick=0.5)
    slices = simulate(600, pace, late=lambda i: 0.04, took=0.02)
    # Sixty slices, each 40 ms late: the last is 40 ms late, not 60 x 40 ms.
    assert slices[-1][0] == pytest.approx(29.5 + 0.04)
    assert rate_of(slices) == pytest.approx(20, rel=0.01)


def test_what_a_schedule_from_each_task_s_own_end_would_do_drifts():
    """The schedule the job does not use (each next slice one interval after the task ran),
    to show what the test above guards against."""
    pace = pace_for(rate=20, tick=0.5)
    now, times = 0.0, []
    for _ in range(60):
        times.append(now)
        now = now + 0.02 + pace.interval + 0.04
    assert times[-1] > 29.5 + 3  # three seconds behind after sixty slices


def test_no_burst_at_the_start_nor_anywhere():
    pace = pace_for(rate=20, tick=0.5)
    slices = simulate(200, pace, late=lambda i: 0.03 * (i % 3), took=0.01)
    assert slices[0][1] <= 20 * 0.5
    assert most_in_any_window(slices, 1.0) <= 20 * 1.0 + pace.size


def test_a_stalled_job_goes_on_at_its_rate_instead_of_catching_up():
    pace = pace_for(rate=20, tick=0.5)
    slices = simulate(200, pace, late=lambda i: 10.0 if i == 5 else 0.0)
    assert slices[5][0] == pytest.approx(2.5 + 10.0)  # the worker was away 10 s
    # From there on, the same rate as before, not the 200 events owed in one go.
    assert most_in_any_window(slices, 1.0) <= 20 + pace.size
    after = slices[5:]
    assert [t for t, _ in after] == pytest.approx(
        [12.5 + 0.5 * i for i in range(len(after))]
    )


def test_a_task_late_by_less_than_an_interval_catches_up_by_at_most_one_slice():
    pace = pace_for(rate=20, tick=0.5)
    slices = simulate(100, pace, late=lambda i: 0.45 if i == 3 else 0.0)
    assert [t for t, _ in slices] == pytest.approx(
        [0.0, 0.5, 1.0, 1.95, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5]
    )
    assert most_in_any_window(slices, 1.0) <= 20 + pace.size


def test_a_slice_that_replayed_less_is_followed_sooner():
    pace = pace_for(rate=20, tick=0.5)
    assert next_slice_due(start=at(0), replayed=10, pace=pace) == at(0.5)
    assert next_slice_due(start=at(0), replayed=4, pace=pace) == at(0.2)
    assert next_slice_due(start=at(0), replayed=0, pace=pace) == at(0)


def test_the_first_slice_and_an_early_one_start_where_the_schedule_says():
    pace = Pace(rate=20, size=10)
    assert slice_start(due=None, now=at(3), pace=pace) == at(3)
    assert slice_start(due=at(5), now=at(3), pace=pace) == at(5)
    assert slice_start(due=at(5), now=at(5.5), pace=pace) == at(5)
    assert slice_start(due=at(5), now=at(5.6), pace=pace) == at(5.6)


def test_measured_rate_counts_from_the_end_of_the_first_chunk():
    assert measured_rate(processed=60, base=10, since=at(0), last=at(2.5)) == 20
    assert measured_rate(processed=10, base=10, since=at(0), last=at(0)) is None
    assert measured_rate(processed=0, base=0, since=None, last=None) is None
    assert measured_rate(processed=12, base=10, since=at(1), last=at(1)) is None


def test_the_estimated_end_follows_the_schedule_or_the_measure():
    pace = Pace(rate=20, size=10)
    now = at(0)
    # 50 events left, the next slice due in 0.5 s: five slices, the last at 2.5 s.
    assert finish_estimate(
        now=now, remaining=50, pace=pace, next_due=at(0.5), measured=20.0
    ) == at(2.5)
    # A job that does not keep up with its rate ends when its measure says.
    assert finish_estimate(
        now=now, remaining=50, pace=pace, next_due=at(0.5), measured=5.0
    ) == at(10)
    # Without a rate, at the measured rate; nothing measured yet, no estimate.
    assert finish_estimate(
        now=now, remaining=300, pace=None, next_due=None, measured=100.0
    ) == at(3)
    assert (
        finish_estimate(now=now, remaining=300, pace=None, next_due=None, measured=None)
        is None
    )
    assert finish_estimate(
        now=now, remaining=0, pace=pace, next_due=None, measured=None
    ) == (now)
