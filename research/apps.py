from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


class ResearchConfig(AppConfig):
    name = "research"
    verbose_name = "Research documents"

    def ready(self) -> None:
        # Every process (web, worker, beat, a command) refuses to start, loudly.
        for error in batch_fits_in_a_task():
            raise ImproperlyConfigured(f"{error.msg} {error.hint}")


def batch_fits_in_a_task(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A batch of INBOX_BATCH_SIZE events, each waiting up to RESEARCH_DOCUMENT_LOCK_TIMEOUT_MS
    for its document, must end well inside the task's soft time limit: every process
    (web, worker, beat, any ``manage.py`` command) refuses to start otherwise, with this
    message."""
    worst = (
        settings.INBOX_BATCH_SIZE * settings.RESEARCH_DOCUMENT_LOCK_TIMEOUT_MS / 1000
    )
    budget = settings.CELERY_TASK_SOFT_TIME_LIMIT / 2
    if worst <= budget:
        return []
    return [
        checks.Error(
            f"INBOX_BATCH_SIZE ({settings.INBOX_BATCH_SIZE}) x "
            f"RESEARCH_DOCUMENT_LOCK_TIMEOUT_MS ({settings.RESEARCH_DOCUMENT_LOCK_TIMEOUT_MS}"
            f") is {worst:.0f} s of lock waits in the worst batch, more than half the "
            f"task's soft time limit ({settings.CELERY_TASK_SOFT_TIME_LIMIT} s).",
            hint="Lower either, or raise CELERY_TASK_SOFT_TIME_LIMIT.",
            id="research.E001",
        )
    ]
