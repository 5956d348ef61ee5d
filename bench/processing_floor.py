"""The floor of the processing benchmark: a Celery task doing one UPDATE per message, on the
same worker settings as the product's task. Loaded by the bench's workers only
(``--include bench.processing_floor``)."""

from celery import shared_task
from django.db import connection

FLOOR_TABLE = "bench_processing_floor"


@shared_task(name="bench.floor_update", acks_late=True)
def floor_update_task(row_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {FLOOR_TABLE} SET done_at = clock_timestamp() WHERE id = %s",  # noqa: S608
            [row_id],
        )
