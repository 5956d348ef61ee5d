from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from . import (
            db,
            logging,
            metrics,
            schema,  # noqa: F401 - registers the OpenAPI extension
        )
        from .relay_state import RelayCollector

        logging.celery_signals_connect()
        metrics.celery_signals_connect()
        db.celery_signals_connect()
        metrics.scrape_collector_register(RelayCollector())
