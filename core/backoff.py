"""Exponential backoff with full jitter, the one rule of every retry the product schedules
(inbox events, trigger attempts): the delay after attempt ``n`` is drawn uniformly from
``[0, min(ceiling, base * 2**(n-1))]``, so that many retries of one outage spread out instead
of arriving together."""

from __future__ import annotations

import random


def full_jitter_delay(*, attempt: int, base: float, ceiling: float) -> float:
    exponent = min(max(attempt - 1, 0), 62)
    return random.uniform(0, min(float(ceiling), float(base) * 2**exponent))
