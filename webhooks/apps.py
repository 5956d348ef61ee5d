from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhook inbox"

    def ready(self) -> None:
        from core.metrics import scrape_collector_register
        from core.relay import outbox_register

        from .metrics import (
            PausedSourcesCollector,
            QueueLagCollector,
            SourceDeliveryCollector,
        )
        from .outbox import INBOX_OUTBOX

        scrape_collector_register(QueueLagCollector())
        scrape_collector_register(SourceDeliveryCollector())
        scrape_collector_register(PausedSourcesCollector())
        # Accepted events, replays and due retries reach the workers through the relay; its
        # sweep publishes again what a lost message left behind.
        outbox_register(INBOX_OUTBOX)
