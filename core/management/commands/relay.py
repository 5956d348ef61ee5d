import signal

from django.core.management.base import BaseCommand

from core.relay.loop import Relay


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
        self.stdout.write(f"relay {relay.relay_id} running")
        relay.run()
        self.stdout.write(
            f"relay {relay.relay_id} stopped after publishing "
            f"{relay.stats.published_rows} rows"
        )
