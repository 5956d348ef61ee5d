import signal

from django.core.management.base import BaseCommand

from core.relay.loop import Relay
from core.tracing import tracing_shutdown, tracing_start


class Command(BaseCommand):
    help = (
        "Run an outbox relay in the foreground until stopped (SIGTERM or Ctrl-C). Every worker "
        "already runs one; this runs one more, apart from the workers (workers started with "
        "RELAY_ENABLED=false then leave the relaying to it)."
    )

    def handle(self, *args, **options):
        relay = Relay(processes=0)  # no pool of its own
        for stop_signal in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop_signal, lambda *_: relay.stop.set())
        # Its publish spans, as a worker's relay has (core/tracing.py).
        tracing_start(process="relay")
        self.stdout.write(f"relay {relay.relay_id} running")
        try:
            relay.run()
        finally:
            tracing_shutdown()
        self.stdout.write(
            f"relay {relay.relay_id} stopped after publishing "
            f"{relay.stats.published_rows} rows"
        )
