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
        from .relay.state import RelayCollector
        from .secrets import secret_settings_check

        # Every process refuses to start with a secret it would send or store with a stray
        # character (docs/security.md, "Secrets"), naming the variable, never the value.
        secret_settings_check()
        logging.celery_signals_connect()
        metrics.celery_signals_connect()
        db.celery_signals_connect()
        metrics.scrape_collector_register(RelayCollector())
