"""/metrics on a real gunicorn with two workers (prometheus multiprocess mode): after a scripted
burst, the counters say exactly what happened, whichever worker answered which request."""

import shutil
import time

import pytest
import requests
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests import processes

from .factories import WebhookSourceFactory, encode, research_event, signed_headers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def samples(base: str) -> dict[tuple[str, tuple], float]:
    text = requests.get(f"{base}/metrics", timeout=10).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_count_a_scripted_burst_exactly_across_two_workers(tmp_path):
    source = WebhookSourceFactory(slug="metered")
    port = processes.free_port()
    server = processes.gunicorn(
        tmp_path,
        port=port,
        workers=2,
        env={
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
            "CELERY_BROKER_URL": "redis://127.0.0.1:1/0",  # no worker needed: fail fast
            "LOG_LEVEL": "WARNING",
        },
    ).start()
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/webhooks/{source.slug}/"
    try:
        processes.wait_http_ok(f"{base}/healthz")
        session = requests.Session()

        def post(body: dict, *, event_id=None, **signing):
            raw = encode(body)
            headers = signed_headers(
                raw_body=raw, event_id=event_id or body["event_id"], **signing
            )
            # A new connection each time spreads requests over both workers.
            return requests.post(
                url, data=raw, headers=headers | {"Connection": "close"}, timeout=10
            ).status_code

        statuses = []
        for n in range(6):  # 6 new events
            statuses.append(post(research_event(event_id=f"m-{n}")))
        for n in range(4):  # 4 duplicates
            statuses.append(post(research_event(event_id=f"m-{n}")))
        for n in range(3):  # 3 inconsistent duplicates
            statuses.append(post(research_event(event_id=f"m-{n}", producer="other")))
        for n in range(2):  # 2 invalid signatures
            statuses.append(post(research_event(event_id=f"bad-{n}"), secret="wrong"))
        stale = int(time.time()) - 3600
        statuses.append(post(research_event(event_id="stale-0"), timestamp=stale))
        session.close()
        assert statuses == [202] * 6 + [200] * 4 + [409] * 3 + [401] * 2 + [400]

        found = samples(base)
    finally:
        server.stop()

    def value(name, **labels):
        return found.get((name, tuple(sorted(labels.items()))), 0.0)

    requests_total = "webhook_requests_total"
    assert value(requests_total, source="metered", status="202") == 6
    assert value(requests_total, source="metered", status="200") == 4
    assert value(requests_total, source="metered", status="409") == 3
    assert value(requests_total, source="metered", status="401") == 2
    assert value(requests_total, source="metered", status="400") == 1
    assert value("webhook_duplicates_total") == 4
    assert value("webhook_inconsistent_duplicates_total") == 3
    failures = "webhook_signature_failures_total"
    assert value(failures, source="metered", reason="mismatch") == 2
    assert value(failures, source="metered", reason="timestamp_out_of_window") == 1
    # Both workers answered: the figures above really were aggregated over processes.
    answered = 0
    for n, path in enumerate(sorted((tmp_path / "prometheus").glob("counter_*.db"))):
        alone = tmp_path / f"process-{n}"
        alone.mkdir()
        shutil.copy(path, alone / path.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))
        if registry.get_sample_value(
            requests_total, {"source": "metered", "status": "202"}
        ):
            answered += 1
    assert answered == 2


def test_a_worker_serves_the_metrics_its_processes_counted(tmp_path):
    from webhooks.models import InboxEvent
    from webhooks.tasks import process_inbox_event_publish

    from .inbox_factories import inbox_event_create, research_envelope

    processes.purge_broker()
    port = processes.free_port()
    worker = processes.celery_worker(
        tmp_path,
        concurrency=2,
        env={
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus-worker"),
            "CELERY_METRICS_PORT": str(port),
            "CELERY_METRICS_ADDR": "127.0.0.1",
        },
    ).start()
    try:
        # Invalid data: the domain rejects it, the event is dead-lettered at once.
        event = inbox_event_create(research_envelope(data={"authors": "not a list"}))
        process_inbox_event_publish(inbox_event_id=event.pk)
        processes.wait_until(
            lambda: (
                InboxEvent.objects.get(pk=event.pk).processing_status == "dead_lettered"
            ),
            timeout=60,
        )
        processes.wait_http_ok(f"http://127.0.0.1:{port}/metrics", timeout=30)
        found = samples(f"http://127.0.0.1:{port}")
    finally:
        worker.stop()
    assert found[("dead_letter_total", ())] == 1
