from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhook inbox"

    def ready(self) -> None:
        from django.core.signals import setting_changed

        from core.logging import correlation_headers_register
        from core.metrics import scrape_collector_register
        from core.relay import outbox_register

        from . import ingest, integrations, schemes
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
        # A webhook's correlation id is its event id, in its scheme's id header.
        correlation_headers_register(
            scheme.id_header for scheme in schemes.schemes().values()
        )

        def registries_forget(*, setting: str, **kwargs) -> None:
            # Tests change the registries: what was derived from them is derived again.
            if setting in ("WEBHOOK_SCHEMES", "WEBHOOK_INTEGRATIONS"):
                schemes.schemes.cache_clear()
                integrations.integration_get.cache_clear()
                ingest.stored_header_names.cache_clear()

        setting_changed.connect(registries_forget, weak=False)
