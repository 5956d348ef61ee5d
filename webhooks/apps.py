from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhook inbox"

    def ready(self) -> None:
        from django.conf import settings

        from core.metrics import scrape_collector_register
        from core.periodic import periodic_task_register

        from .metrics import QueueLagCollector

        scrape_collector_register(QueueLagCollector())
        periodic_task_register(
            name="inbox-sweep",
            task="webhooks.sweep",
            every_seconds=settings.INBOX_SWEEP_INTERVAL_SECONDS,
        )
