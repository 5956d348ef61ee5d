from celery import shared_task


@shared_task(name="webhooks.process_inbox_event")
def process_inbox_event_task(inbox_event_id: int) -> None:
    """Processes one inbox row. Idempotent: a second or concurrent run never applies twice."""
    raise NotImplementedError("filled in by the processing pipeline")
