from django.apps import AppConfig


class IdempotencyConfig(AppConfig):
    name = "idempotency"
    verbose_name = "Idempotency keys"

    def ready(self) -> None:
        from django.conf import settings

        from core.metrics import scrape_collector_register
        from core.periodic import periodic_task_register

        from .metrics import StuckKeysCollector

        scrape_collector_register(StuckKeysCollector())
        periodic_task_register(
            name="idempotency-cleanup",
            task="idempotency.cleanup",
            every_seconds=settings.IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS,
        )
