"""The benchmarks' wait for the workers they start (``bench.harness.workers_ready``): a run
begins once every worker consumes and a relay started after them publishes, not after a
fixed pause."""

import pytest

from bench.harness import workers_ready
from core.models import RelayHeartbeat
from tests import processes

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_workers_are_ready_once_each_consumes_and_a_relay_of_theirs_publishes(workers):
    # A relay of an earlier start, still reporting itself active: not one of these.
    RelayHeartbeat.beat(relay_id="earlier:1", published=0, active=True)
    started = [workers.start(name="r1"), workers.start(name="r2")]

    workers_ready(started, url=processes.test_database_url())

    assert all(" ready." in worker.log() for worker in started)
    theirs = RelayHeartbeat.objects.exclude(relay_id="earlier:1")
    assert theirs.count() == 2
    assert theirs.filter(active=True).count() == 1


def test_a_worker_that_ends_while_starting_stops_the_wait(workers):
    # A worker refused at start (a setting it cannot use) ends at once.
    worker = workers.start({"CELERY_METRICS_PORT": "not-a-port"}, name="gone")

    with pytest.raises(RuntimeError, match="a worker ended while starting"):
        workers_ready([worker], url=processes.test_database_url(), timeout=60)
