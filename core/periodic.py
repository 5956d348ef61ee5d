"""Periodic work: each app registers its own beat entries from its ``AppConfig.ready``, with
Celery's own ``add_periodic_task``, so that ``core`` and the settings name no app's task.

Beat runs periodic work only: the work it schedules is idempotent and safe to run late or
twice, and nothing a request accepted waits for it."""

from celery import current_app


def periodic_task_register(*, name: str, task: str, every_seconds: float) -> None:
    """Runs the task named ``task`` every ``every_seconds``. A run that waited longer than
    its own period in the queue expires: the next one does the same work."""
    current_app.add_periodic_task(
        every_seconds,
        current_app.signature(task),
        name=name,
        expires=every_seconds,
    )
