"""Whether the outbox relays keep up: how long the oldest waiting row of each outbox has waited
for its message, and how many relays reported themselves alive lately. Read from the database,
so any process answers for all of them: ``/metrics`` (gauges) and ``/readyz`` (its body)."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from ..metrics import GaugeMetricFamily
from ..models import RelayHeartbeat
from .outbox import outbox_lag_seconds


def relays_alive() -> tuple[int, int]:
    """Relays whose heartbeat is fresher than three of their periods, and of those the ones
    that said they publish (one, with several on PostgreSQL: docs/subsystems/relay.md, "One
    relay publishes at a time")."""
    horizon = timezone.now() - timedelta(seconds=3 * settings.RELAY_HEARTBEAT_SECONDS)
    counts = RelayHeartbeat.objects.filter(last_seen_at__gte=horizon).aggregate(
        alive=Count("id"), active=Count("id", filter=Q(active=True))
    )
    return counts["alive"], counts["active"]


def relay_state() -> dict:
    lags = outbox_lag_seconds()
    alive, active = relays_alive()
    return {
        "relays_alive": alive,
        "relays_active": active,
        "lag_seconds": {name: round(lag, 3) for name, lag in lags.items()},
        "keeping_up": all(
            lag < settings.RELAY_LAG_ALERT_SECONDS for lag in lags.values()
        ),
    }


class RelayCollector:
    """``outbox_lag_seconds{outbox}``, ``outbox_relays_alive`` and
    ``outbox_relays_active``, read at scrape time."""

    def collect(self):
        lag = GaugeMetricFamily(
            "outbox_lag_seconds",
            "How long the oldest row waiting for its message has waited, per outbox.",
            labels=["outbox"],
        )
        for name, seconds in outbox_lag_seconds().items():
            lag.add_metric([name], seconds)
        yield lag
        alive_count, active_count = relays_alive()
        alive = GaugeMetricFamily(
            "outbox_relays_alive",
            "Outbox relays (one per worker) that reported themselves alive lately.",
        )
        alive.add_metric([], alive_count)
        yield alive
        active = GaugeMetricFamily(
            "outbox_relays_active",
            "Of those, the relays that said they publish (the others stand by).",
        )
        active.add_metric([], active_count)
        yield active
