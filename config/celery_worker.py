"""The ``celery worker`` program of this project (``config.celery_app.App.Worker``).

Its constructor sets up the folder in which the worker's pool processes share their metrics
(``core.metrics_dir``), before Celery's own constructor loads Django and with it every
metric, and before the pool forks: the worker's /metrics on ``CELERY_METRICS_PORT`` then
answers the sums over all its processes, with no variable to set. A prefork pool of several
processes whose metrics would not be shared is refused at start (``core.metrics``).

Its pool processes ignore SIGTERM: the worker's main process alone decides how they stop.
A SIGTERM sent to the worker's whole process group (honcho's Ctrl-C in ``make run``, systemd's
default ``KillMode=control-group``) is then the main process's warm shutdown, which lets each
pool process finish its task and exit, instead of pool processes killed mid-task, one of them
perhaps holding the pool's queue lock, and a main process that waits on that lock until it is
killed (docs/scaling.md, "Stopping a worker"). A hard time limit still ends a pool process
(Celery follows its SIGTERM with SIGKILL).

Its consumer (``Consumer``, the ``worker_consumer`` setting) outlives the loss of the broker's
connection on Redis too (docs/scaling.md, "When the broker goes away").
"""

import functools
import logging
import signal

from celery import signals
from celery.apps.worker import Worker as CeleryWorker
from celery.worker.consumer import Consumer as CeleryConsumer
from celery.worker.state import active_requests

from core.metrics_dir import metrics_dir_prepare
from core.tracing import tracing_shutdown, tracing_start

logger = logging.getLogger(__name__)


class Worker(CeleryWorker):
    def __init__(self, *args, **kwargs):
        metrics_dir_prepare(server="celery")
        super().__init__(*args, **kwargs)


@signals.worker_process_init.connect(weak=False)
def _pool_process_ignores_sigterm(**kwargs):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@signals.worker_process_init.connect(weak=False)
def _pool_process_tracing_start(**kwargs):
    # Each pool process its own tracer provider, after the fork (core/tracing.py): the
    # batch processor's thread and the exporter's connections belong to one process.
    tracing_start(process="worker")


@signals.worker_process_shutdown.connect(weak=False)
def _pool_process_tracing_flush(**kwargs):
    # Before a pool process is recycled or the worker stops: its last spans are exported.
    tracing_shutdown()


class Consumer(CeleryConsumer):
    """Celery's consumer, whose reconnect after a lost broker connection cannot end the worker
    (docs/scaling.md, "When the broker goes away").

    After a lost connection Celery collects the old connection, then closes it, then connects
    again; tasks taken on the old connection run on. Two steps of that failed on Redis with an
    ``AttributeError``, which Celery does not expect there, so the worker ended with
    "Unrecoverable error":

    - the close, when the connection was lost while the consumer waited in its ``BRPOP`` with
      messages taken and not yet acknowledged: the collect drops the transport before the
      channel has closed, and the channel then asks the dropped transport for the broker's
      address, to put those messages back;
    - the acknowledgement, at its end, of a task taken on the old connection: its channel asks
      the same dropped transport.

    Here the close of the discarded connection may fail (it is logged), and the messages taken
    on it are not acknowledged on it: they were already given back or will be (RabbitMQ
    requeues a lost connection's messages; Redis keeps them until its visibility timeout), and
    their redelivery is harmless (a finished event or job is not applied again). The relay's
    sweep has meanwhile published every event that is not finished again.
    """

    def on_connection_error_after_connected(self, exc):
        connection = self.connection
        taken_on_it = [
            request for request in active_requests if not request.acknowledged
        ]
        if connection is not None:
            connection.close = functools.partial(
                _discarded_connection_close, connection
            )
        try:
            super().on_connection_error_after_connected(exc)
        finally:
            for request in taken_on_it:
                request.acknowledged = True


def _discarded_connection_close(connection) -> None:
    try:
        type(connection).close(connection)
    except AttributeError:
        logger.warning("worker.broker_connection_close_failed", exc_info=True)
