"""Every worker serves the counters its processes keep (dead letters, stale events, processing
latency, triggers) at ``:9808/metrics`` by default, on loopback unless ``CELERY_METRICS_ADDR``
says otherwise; ``CELERY_METRICS_PORT`` moves it, ``0`` turns it off, and a port already taken
refuses the start with a message that names the variable."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests import processes
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import inbox_events_bulk_create
from webhooks.models import InboxEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

DEFAULT_PORT = 9808
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - the address a test asks a worker to listen on


def group_listeners(pgid: int) -> set[tuple[str, int]]:
    """The TCP addresses on which a process of the group ``pgid`` listens (from /proc)."""
    inodes = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) != pgid:
                continue
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            continue
    found = set()
    for table, width in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            address, port = local.split(":")
            raw = bytes.fromhex(address)
            if width == 4:
                host = socket.inet_ntop(socket.AF_INET, raw[::-1])
            else:
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                host = socket.inet_ntop(socket.AF_INET6, words)
            found.add((host, int(port, 16)))
    return found


def worker_started(tmp_path, *, name: str = "w1", **env: str) -> processes.Process:
    """``celery -A config worker`` with the test database and broker; ``env`` adds to it,
    and a variable given as None is left out of it (as the command of docs/operations.md
    has none)."""
    worker = processes.celery_worker(tmp_path, name=name)
    for key, value in env.items():
        if value is None:
            worker.env.pop(key, None)
        else:
            worker.env[key] = value
    return worker.start()


def wait_ready(worker: processes.Process) -> None:
    try:
        processes.wait_until(lambda: "ready." in worker.log(), timeout=60)
    except AssertionError:
        raise AssertionError(worker.log()[-3000:]) from None


def scrape(port: int) -> dict[str, float]:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def test_a_worker_started_as_the_readme_says_serves_its_counters_at_9808(tmp_path):
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", DEFAULT_PORT))
        except OSError:
            pytest.fail(
                f"port {DEFAULT_PORT} is taken on this machine: free it to run this"
            )
    processes.purge_broker()
    worker = worker_started(
        tmp_path, CELERY_METRICS_PORT=None, CELERY_METRICS_ADDR=None
    )
    try:
        wait_ready(worker)
        assert group_listeners(worker.pid) == {("127.0.0.1", DEFAULT_PORT)}
        # Invalid data: dead-lettered at once, by the worker's pool process.
        inbox_events_bulk_create([research_event(data={"authors": "not a list"})])
        processes.wait_until(
            lambda: InboxEvent.objects.filter(
                processing_status="dead_lettered"
            ).exists(),
            timeout=60,
        )
        processes.wait_until(
            lambda: scrape(DEFAULT_PORT).get("dead_letter_total") == 1, timeout=10
        )
    finally:
        worker.stop()


def test_the_metrics_port_is_on_loopback_unless_an_address_is_named(tmp_path):
    port = processes.free_port()
    worker = worker_started(
        tmp_path, CELERY_METRICS_PORT=str(port), CELERY_METRICS_ADDR=None
    )
    try:
        wait_ready(worker)
        assert group_listeners(worker.pid) == {("127.0.0.1", port)}
    finally:
        worker.stop()
    other = processes.free_port()
    worker = worker_started(
        tmp_path,
        name="w2",
        CELERY_METRICS_PORT=str(other),
        CELERY_METRICS_ADDR=ALL_INTERFACES,
    )
    try:
        wait_ready(worker)
        assert group_listeners(worker.pid) == {(ALL_INTERFACES, other)}
    finally:
        worker.stop()


def test_port_zero_serves_no_metrics(tmp_path):
    worker = worker_started(tmp_path, CELERY_METRICS_PORT="0")
    try:
        wait_ready(worker)
        assert group_listeners(worker.pid) == set()
    finally:
        worker.stop()


def test_a_metrics_port_already_taken_refuses_the_start_naming_the_variable(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = worker_started(tmp_path, CELERY_METRICS_PORT=str(port))
        try:
            processes.wait_until(lambda: not worker.alive(), timeout=60)
        finally:
            worker.stop()
    assert worker.popen.returncode != 0
    log = worker.log()
    assert "CELERY_METRICS_PORT" in log
    assert str(port) in log
    assert "ready." not in log
