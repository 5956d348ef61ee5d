from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from . import schema  # noqa: F401 - registers the OpenAPI extension
        from .logging import celery_signals_connect
        from .metrics import celery_signals_connect as metrics_celery_signals_connect

        celery_signals_connect()
        metrics_celery_signals_connect()
