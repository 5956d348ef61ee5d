from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhook inbox"

    def ready(self) -> None:
        from django.core.signals import setting_changed

        # Every process (web, worker, beat, a command) refuses to start, loudly.
        for error in batch_fits_in_a_task():
            raise ImproperlyConfigured(f"{error.msg} {error.hint}")

        from core.logging import correlation_headers_register
        from core.metrics import scrape_collector_register
        from core.periodic import periodic_task_register
        from core.relay.outbox import outbox_register

        from . import ingest, integrations, schemes
        from .metrics import (
            InboxKeysCollector,
            InboxPartitionsCollector,
            PausedSourcesCollector,
            QueueLagCollector,
            SourceDeliveryCollector,
        )
        from .outbox import INBOX_OUTBOX

        scrape_collector_register(InboxPartitionsCollector())
        scrape_collector_register(InboxKeysCollector())
        periodic_task_register(
            name="inbox-partitions",
            task="webhooks.inbox_partitions",
            every_seconds=3600,
        )
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


def batch_fits_in_a_task(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A batch of INBOX_BATCH_SIZE events, each waiting up to INBOX_LOCK_TIMEOUT_MS for its
    handler's lock (a research document's), after one such wait for the lock of the whole
    set (which then falls back to one event at a time), must end well inside the task's soft
    time limit: every process (web, worker, beat, any ``manage.py`` command) refuses to start
    otherwise, with this message."""
    worst = (settings.INBOX_BATCH_SIZE + 1) * settings.INBOX_LOCK_TIMEOUT_MS / 1000
    budget = settings.CELERY_TASK_SOFT_TIME_LIMIT / 2
    if worst <= budget:
        return []
    return [
        checks.Error(
            f"(INBOX_BATCH_SIZE ({settings.INBOX_BATCH_SIZE}) + 1) x "
            f"INBOX_LOCK_TIMEOUT_MS ({settings.INBOX_LOCK_TIMEOUT_MS}) is {worst:.0f} s "
            "of lock waits in the worst batch, more than half the task's soft time limit "
            f"({settings.CELERY_TASK_SOFT_TIME_LIMIT} s).",
            hint="Lower either, or raise CELERY_TASK_SOFT_TIME_LIMIT.",
            id="webhooks.E001",
        )
    ]
