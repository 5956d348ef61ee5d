"""/metrics on real servers started as docs/operations.md's "Processes" says, with no variable set:
gunicorn's workers and a Celery worker's pool processes share their metrics (prometheus
multiprocess mode, set up by the servers themselves), so after a scripted burst every scrape
says exactly what happened, whichever process answered which request."""

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests import processes
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import (
    WebhookSourceFactory,
    encode,
    inbox_events_bulk_create,
    signed_headers,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCRAPES = 6


def samples(base: str) -> dict[tuple[str, tuple], float]:
    # A new connection per scrape: the server's workers take turns answering.
    text = requests.get(
        f"{base}/metrics", headers={"Connection": "close"}, timeout=10
    ).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def processes_that_counted(directory: Path | None, tmp_path, metric: str) -> int:
    """How many processes' files hold a sample of ``metric`` above zero, each read alone."""
    if directory is None:
        return 0
    counted = 0
    for n, path in enumerate(sorted(directory.glob("counter_*.db"))):
        alone = tmp_path / f"process-{n}-{time.monotonic_ns()}"
        alone.mkdir()
        shutil.copy(path, alone / path.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))
        counted += any(
            sample.name == metric and sample.value > 0
            for family in registry.collect()
            for sample in family.samples
        )
    return counted


def documented_env(tmp_path, **overrides: str) -> dict[str, str]:
    """The test database and broker, and nothing about metrics. TMPDIR keeps the servers'
    metrics folders where the test can look into them."""
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    env = processes.child_env(TMPDIR=str(temp), LOG_LEVEL="WARNING", **overrides)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    return env


def metrics_folder(tmp_path, server: str) -> Path | None:
    found = sorted((tmp_path / "tmp").glob(f"prometheus-{server}-*"))
    return found[0] if len(found) == 1 else None


def test_metrics_count_a_scripted_burst_exactly_across_two_workers(tmp_path):
    source = WebhookSourceFactory(slug="metered")
    port = processes.free_port()
    # Exactly as docs/operations.md's "Processes" says, at the repository root; only the address is
    # chosen by the test (gunicorn's own GUNICORN_CMD_ARGS).
    server = processes.Process(
        [str(processes.BIN / "gunicorn"), "config.wsgi", "-w", "2"],
        documented_env(
            tmp_path,
            GUNICORN_CMD_ARGS=f"--bind 127.0.0.1:{port}",
            CELERY_BROKER_URL="redis://127.0.0.1:1/0",  # never reached by a request
        ),
        tmp_path / "gunicorn.log",
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

    def answered() -> int:
        folder = metrics_folder(tmp_path, "gunicorn")
        return processes_that_counted(folder, tmp_path, "webhook_requests_total")

    rounds = 0
    try:
        processes.wait_http_ok(f"{base}/healthz")
        # The same scripted burst, repeated until both workers have answered part of it.
        while rounds == 0 or (answered() < 2 and rounds < 5):
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
        scrapes = [samples(base) for _ in range(SCRAPES)]
        workers_answered = answered()
        folder = metrics_folder(tmp_path, "gunicorn")
    finally:
        server.stop()

    requests_total = "webhook_requests_total"
    failures = "webhook_signature_failures_total"
    for found in scrapes:

        def value(name, found=found, **labels):
            return found.get((name, tuple(sorted(labels.items()))), 0.0)

        # 16 webhook requests a round, every one of them in every scrape.
        assert value(requests_total, source="metered", status="202") == 6 * rounds
        assert value(requests_total, source="metered", status="200") == 4 * rounds
        assert value(requests_total, source="metered", status="409") == 3 * rounds
        assert value(requests_total, source="metered", status="401") == 2 * rounds
        assert value(requests_total, source="metered", status="400") == 1 * rounds
        assert value("webhook_duplicates_total") == 4 * rounds
        assert value("webhook_inconsistent_duplicates_total") == 3 * rounds
        assert value(failures, source="metered", reason="mismatch") == 2 * rounds
        assert (
            value(failures, source="metered", reason="timestamp_out_of_window")
            == rounds
        )
    # Both workers answered: the figures above really were aggregated over processes.
    assert workers_answered == 2
    # The server's own folder, named by gunicorn.conf.py, went away with the server.
    assert folder is not None
    assert not folder.exists()


def test_a_worker_serves_the_metrics_its_pool_processes_counted(tmp_path):
    from webhooks.models import InboxEvent

    processes.purge_broker()
    port = processes.free_port()
    # `celery -A config worker --concurrency 2`, with the port its /metrics is served on.
    # Its relay publishes the events; two per message, so that both pool processes get a
    # share of a round.
    worker = processes.celery_worker(
        tmp_path,
        concurrency=2,
        env=documented_env(
            tmp_path,
            CELERY_METRICS_PORT=str(port),
            CELERY_METRICS_ADDR="127.0.0.1",
            INBOX_BATCH_SIZE="2",
        ),
    ).start()
    base = f"http://127.0.0.1:{port}"

    def pool_processes_counted() -> int:
        folder = metrics_folder(tmp_path, "celery")
        return processes_that_counted(folder, tmp_path, "dead_letter_total")

    dead = 0
    try:
        processes.wait_http_ok(f"{base}/metrics", timeout=60)
        # Invalid data: the domain rejects it, each event is dead-lettered at once. Rounds
        # of events committed together (the worker's relay publishes them), until both pool
        # processes dead-lettered some.
        while dead == 0 or (pool_processes_counted() < 2 and dead < 60):
            events = inbox_events_bulk_create(
                [research_event(data={"authors": "not a list"}) for _ in range(12)]
            )
            dead += len(events)
            processes.wait_until(
                lambda expected=dead: (
                    InboxEvent.objects.filter(processing_status="dead_lettered").count()
                    == expected
                ),
                timeout=60,
            )
        scrapes = [samples(base) for _ in range(SCRAPES)]
        counted = pool_processes_counted()
    finally:
        worker.stop()
    assert [found[("dead_letter_total", ())] for found in scrapes] == [dead] * SCRAPES
    assert counted == 2


def test_gunicorn_without_the_repository_settings_refuses_to_serve(tmp_path):
    """Started elsewhere than the repository root, gunicorn does not read gunicorn.conf.py:
    the application refuses to boot rather than count per worker."""
    port = processes.free_port()
    env = documented_env(tmp_path, PYTHONPATH=str(processes.ROOT))
    server = processes.Process(
        [
            str(processes.BIN / "gunicorn"),
            "config.wsgi",
            "-w",
            "2",
            "--bind",
            f"127.0.0.1:{port}",
        ],
        env,
        tmp_path / "gunicorn-elsewhere.log",
        cwd=tmp_path,
    ).start()
    try:
        processes.wait_until(lambda: not server.alive(), timeout=60)
    finally:
        server.stop()
    assert server.popen.returncode != 0
    assert "gunicorn.conf.py" in server.log()


def test_a_prefork_pool_whose_metrics_would_not_be_shared_is_refused(tmp_path):
    """prometheus_client imported before the worker could name a folder: its pool
    processes would each count alone, so the worker refuses to start."""
    env = documented_env(tmp_path)
    program = (
        "import prometheus_client\n"
        "from config.celery_app import app\n"
        "app.worker_main(['worker', '--concurrency', '2', '--without-gossip',"
        " '--without-mingle'])\n"
    )
    worker = processes.Process(
        [str(processes.BIN / "python"), "-c", program],
        env,
        tmp_path / "worker-early-import.log",
    ).start()
    try:
        processes.wait_until(lambda: not worker.alive(), timeout=60)
    finally:
        worker.stop()
    assert worker.popen.returncode != 0
    assert "Refusing to start" in worker.log()
    assert "PROMETHEUS_MULTIPROC_DIR" in worker.log()
