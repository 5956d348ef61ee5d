import json
import sys
import uuid

import pytest
from django.views.debug import ExceptionReporter
from prometheus_client.parser import text_string_to_metric_families

from core.logging import correlation_id_bound
from core.models import WorkerHeartbeat
from core.tasks import heartbeat_task
from tests import processes


@pytest.mark.django_db
def test_metrics_is_prometheus_text_with_the_spec_names(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    names = {
        family.name
        for family in text_string_to_metric_families(response.content.decode())
    }
    for name in (
        "webhook_duplicates",
        "webhook_inconsistent_duplicates",
        "webhook_stale_events",
        "webhook_processing_latency_seconds",
        "webhook_queue_lag_seconds",
        "dead_letter",
        "idempotency_stuck_processing",
    ):
        assert name in names


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_correlation_id_travels_from_the_publisher_to_the_worker_log(tmp_path):
    processes.purge_broker()
    worker = processes.celery_worker(tmp_path).start()
    correlation = f"evt-{uuid.uuid4().hex}"
    token = uuid.uuid4().hex
    try:
        with correlation_id_bound(correlation):
            heartbeat_task.delay(token)
        processes.wait_until(
            lambda: WorkerHeartbeat.objects.filter(token=token).exists(), timeout=60
        )
        processes.wait_until(lambda: token in worker.log(), timeout=10)
    finally:
        worker.stop()
    records = [
        json.loads(line)
        for line in worker.log().splitlines()
        if line.startswith("{") and token in line and "worker.heartbeat" in line
    ]
    assert records, worker.log()[-2000:]
    assert all(record.get("correlation_id") == correlation for record in records)


def _error_report(request) -> str:
    # Raised and caught here, so that the report's frames hold no secret of the test itself.
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        reporter = ExceptionReporter(request, *sys.exc_info())
        return reporter.get_traceback_text() + reporter.get_traceback_html()


def test_error_reports_hide_connection_urls_and_credentials(rf, settings):
    secrets = {
        "broker": uuid.uuid4().hex,
        "database": uuid.uuid4().hex,
        "token": uuid.uuid4().hex,
        "signature": uuid.uuid4().hex,
    }
    settings.DEBUG = False
    settings.CELERY_BROKER_URL = f"redis://:{secrets['broker']}@cache:6379/0"
    settings.DATABASE_URL = f"postgres://app:{secrets['database']}@db/app"
    request = rf.post(
        "/webhooks/demo/",
        data=b"{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secrets['token']}",
        HTTP_X_WEBHOOK_SIGNATURE=f"v1={secrets['signature']}",
    )
    text = _error_report(request)
    assert "boom" in text
    for secret in [*secrets.values(), settings.SECRET_KEY]:
        assert secret not in text
