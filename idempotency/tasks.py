from celery import shared_task

from .services import idempotency_records_cleanup


@shared_task(name="idempotency.cleanup")
def idempotency_cleanup_task() -> dict:
    """Beat, every IDEMPOTENCY_CLEANUP_INTERVAL_SECONDS: expires and purges old records."""
    return idempotency_records_cleanup()
