"""/metrics on a real gunicorn with two workers (prometheus multiprocess mode): after a scripted
burst, the counters say exactly what happened, whichever worker answered which request."""

import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests import processes
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    InboxEventFactory,
    WebhookSourceFactory,
    encode,
    signed_headers,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def samples(base: str) -> dict[tuple[str, tuple], float]:
    text = requests.get(f"{base}/metrics", timeout=10).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def processes_that_answered(directory, tmp_path) -> int:
    """How many processes' files hold a ``webhook_requests_total`` sample, each read alone."""
    answered = 0
    for n, path in enumerate(sorted(directory.glob("counter_*.db"))):
        alone = tmp_path / f"process-{n}-{time.monotonic_ns()}"
        alone.mkdir()
        shutil.copy(path, alone / path.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))
        answered += any(
            sample.name == "webhook_requests_total" and sample.value > 0
            for metric in registry.collect()
            for sample in metric.samples
        )
    return answered


def test_metrics_count_a_scripted_burst_exactly_across_two_workers(tmp_path):
    source = WebhookSourceFactory(slug="metered")
    port = processes.free_port()
    metrics_dir = tmp_path / "prometheus"
    server = processes.gunicorn(
        tmp_path,
        port=port,
        workers=2,
        env={
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
            "CELERY_BROKER_URL": "redis://127.0.0.1:1/0",  # no worker needed: fail fast
            "LOG_LEVEL": "WARNING",
        },
    ).start()
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/webhooks/{source.slug}/"

    def post(body: dict, **signing) -> int:
        raw = encode(body)
        headers = signed_headers(raw_body=raw, event_id=body["event_id"], **signing)
        return requests.post(
            url, data=raw, headers=headers | {"Connection": "close"}, timeout=10
        ).status_code

    def at_once(calls) -> list[int]:
        # Requests in flight together: a sync worker serves one at a time, so the other
        # worker takes its share.
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            return sorted(pool.map(lambda call: call(), calls))

    rounds = 0
    try:
        processes.wait_http_ok(f"{base}/healthz")
        # The same scripted burst, repeated until both workers have answered part of it.
        while rounds == 0 or (
            processes_that_answered(metrics_dir, tmp_path) < 2 and rounds < 5
        ):
            r = rounds
            new = [research_event(event_id=f"m{r}-{n}") for n in range(6)]
            assert at_once([lambda b=b: post(b) for b in new]) == [202] * 6
            duplicates = [lambda b=b: post(b) for b in new[:4]]
            assert at_once(duplicates) == [200] * 4
            conflicting = [lambda b=b: post(dict(b, producer="other")) for b in new[:3]]
            assert at_once(conflicting) == [409] * 3
            unsigned = [
                lambda n=n, r=r: post(
                    research_event(event_id=f"bad{r}-{n}"), secret="wrong"
                )
                for n in range(2)
            ]
            assert at_once(unsigned) == [401] * 2
            stale = int(time.time()) - 3600
            assert post(research_event(event_id=f"stale{r}"), timestamp=stale) == 400
            rounds += 1
        found = samples(base)
        answered = processes_that_answered(metrics_dir, tmp_path)
    finally:
        server.stop()

    def value(name, **labels):
        return found.get((name, tuple(sorted(labels.items()))), 0.0)

    requests_total = "webhook_requests_total"
    assert value(requests_total, source="metered", status="202") == 6 * rounds
    assert value(requests_total, source="metered", status="200") == 4 * rounds
    assert value(requests_total, source="metered", status="409") == 3 * rounds
    assert value(requests_total, source="metered", status="401") == 2 * rounds
    assert value(requests_total, source="metered", status="400") == 1 * rounds
    assert value("webhook_duplicates_total") == 4 * rounds
    assert value("webhook_inconsistent_duplicates_total") == 3 * rounds
    failures = "webhook_signature_failures_total"
    assert value(failures, source="metered", reason="mismatch") == 2 * rounds
    assert value(failures, source="metered", reason="timestamp_out_of_window") == rounds
    # Both workers answered: the figures above really were aggregated over processes.
    assert answered == 2


def test_a_worker_serves_the_metrics_its_processes_counted(tmp_path):
    from webhooks.dispatch import inbox_event_publish
    from webhooks.models import InboxEvent

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
        event = InboxEventFactory(body=research_event(data={"authors": "not a list"}))
        inbox_event_publish(inbox_event_id=event.pk)
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
