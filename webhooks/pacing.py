"""The schedule of a bulk replay job given a rate (docs/subsystems/processing.md, "A bulk replay
job"): pure functions of the job's numbers and a time, no database, no clock of their own.

A job at ``rate`` events per second replays in slices of ``size`` events, one slice every
``size / rate`` seconds; ``size`` is about ``BULK_REPLAY_RATE_TICK_SECONDS`` worth of
events (at least one), so nothing goes out in a burst at the start.

Each slice's due time follows from the previous slice's due time and what that slice
replayed, not from when its task happened to run: a task that runs a little late (the broker,
the worker's timer, a busy pool) keeps its place in the schedule, and those small delays do
not add up over the job (no drift). A task later than one interval (a worker restarted, a
queue backed up) starts the schedule again from now instead of catching up in one burst: the
rate is a ceiling, never made up for afterwards."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

# A job measured at less than this share of its rate does not keep up with it (the workers,
# not the schedule, set its pace): its estimated end follows the measure.
KEEPS_UP = 0.9

# What a rate promises, wherever one is offered (a resume, a bulk replay job, their
# commands): each event is one of the rate's N a second, and a document's events go one
# after the other (docs/subsystems/relay.md, "One document's events in order").
RATE_PROMISE = (
    "at most N events a second, every event counted: a document's next event waits for "
    "its own turn and for the one before it to finish"
)


@dataclass(frozen=True)
class Pace:
    rate: float  # events per second
    size: int  # events per slice

    @property
    def interval(self) -> float:
        """Seconds from one slice's due time to the next (for a full slice)."""
        return self.size / self.rate


def pace_for(*, rate: float, tick: float) -> Pace:
    """The slices of a job at ``rate``: about ``tick`` seconds worth of events each."""
    # The epsilon keeps 20/s over 0.5 s at 10 events, whatever the float rounding.
    return Pace(rate=rate, size=max(1, math.floor(rate * tick + 1e-9)))


def slice_start(*, due: datetime | None, now: datetime, pace: Pace) -> datetime:
    """Where the slice about to run stands in the schedule: its due time when it runs at most
    one interval after it (or before it), else now (there was no schedule yet, or the job
    fell far behind: it goes on from now at its rate, it does not catch up)."""
    if due is None or (now - due).total_seconds() > pace.interval:
        return now
    return due


def next_slice_due(*, start: datetime, replayed: int, pace: Pace) -> datetime:
    """When the next slice is due: ``replayed`` events at the rate after this slice's start.
    A slice that replayed fewer events than its size (rows a concurrent replay took) takes
    less time; one that replayed none is followed at once."""
    return start + timedelta(seconds=replayed / pace.rate)


def measured_rate(
    *, processed: int, base: int, since: datetime | None, last: datetime | None
) -> float | None:
    """Events per second replayed between the end of a run's first chunk (``since``, when
    ``base`` events were done) and its latest chunk (``last``): counting from the end of the
    first chunk neither counts the first chunk in no time nor misses the last one's wait."""
    if since is None or last is None or processed <= base:
        return None
    seconds = (last - since).total_seconds()
    if seconds <= 0:
        return None
    return (processed - base) / seconds


def finish_estimate(
    *,
    now: datetime,
    remaining: int,
    pace: Pace | None,
    next_due: datetime | None,
    measured: float | None,
) -> datetime | None:
    """When the last of ``remaining`` events should be replayed: at a rate, by the schedule
    from the next slice's due time (later if the job measurably does not keep up with its
    rate); without one, at the measured rate. ``None`` when nothing tells yet."""
    if remaining <= 0:
        return now
    by_measure = now + timedelta(seconds=remaining / measured) if measured else None
    if pace is None:
        return by_measure
    start = max(now, next_due) if next_due is not None else now
    slices = math.ceil(remaining / pace.size)
    by_schedule = start + timedelta(seconds=(slices - 1) * pace.interval)
    if by_measure is not None and measured and measured < pace.rate * KEEPS_UP:
        return max(by_schedule, by_measure)
    return by_schedule
