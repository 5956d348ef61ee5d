"""A request's cost without the server around it: the WSGI application called in this process
for each of ``count`` signed deliveries, after 200 to warm it up, and the CPU time per request
of this process and of its database backend printed, with the WAL it wrote per request
(``bench.wal``: in all, and by relation where ``pg_waldump`` can read the log).

    python -m bench.inprocess ingest 2000       # POST /webhooks/<slug>/ through config.wsgi
    python -m bench.inprocess ingest-v1a 2000   # the same, signed v1a (Ed25519)
    python -m bench.inprocess bare 2000         # the bare floor's view (bench.bare_wsgi)
    python -m bench.inprocess bare-narrow 2000  # its narrow insert (the id and the body)
    python -m bench.inprocess deployments 2000  # POST /api/deployments/, a new key each
    python -m bench.inprocess insert 2000       # their floor: /_bench/insert through config.wsgi
    python -m bench.inprocess process 10000     # processing: see below

On a machine whose speed drifts (a shared host), the times of two runs differ more than the
code does; the instructions do not: run it under valgrind's callgrind twice with two counts
(``valgrind --tool=callgrind python -m bench.inprocess ingest 100``, then ``600``), and the
difference of the two totals divided by 500 is the instructions one request runs in this
process, the same from one run to the next within a fraction of a percent
(docs/bench-log/2026-12-03.md, "Headers read from the environ").

``process``: ``count`` signed new events accepted through config.wsgi (untimed), then
processed in this process as a worker processes its messages (``inbox_events_process``, in
batches of ``BENCH_INPROCESS_BATCH`` ids, default ``INBOX_BATCH_SIZE``): the CPU time per
event of this process and of its database backend, and the WAL the processing wrote per
event (``pg_current_wal_lsn``; a checkpoint first, so that each run pays its full-page
images alike), then that WAL by relation (``bench.wal``: every heap and index, read back with
``pg_waldump``). No broker: what a set costs the database and the worker's Python. With
``--relay``, the relay's claims of the rows come first, measured the same way (its stamps,
the messages built and not published).

The bench database is reset first with ``--reset`` (else it must hold the bench sources:
``python -m bench.ingest`` leaves them)."""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Callable

from django.http.request import HttpHeaders

from bench.harness import cpu_seconds, database_reset, manage, sql, stack_env
from bench.wal import WalRange, breakdown, report

WARM_UP = 200
# Requests built ahead whatever the count, so that two counts differ by their requests only.
BUILT = 1000


def _environ(request, *, path: str) -> dict:
    environ = {
        "REQUEST_METHOD": request.method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.errors": sys.stderr,
        "CONTENT_LENGTH": str(len(request.body)),
    }
    for name, value in request.headers.items():
        environ[HttpHeaders.to_wsgi_name(name)] = value
    return environ


def main(argv: list[str]) -> int:
    reset = "--reset" in argv
    relay = "--relay" in argv
    args = [a for a in argv if a not in ("--reset", "--relay")]
    what = args[0] if args else "ingest"
    count = int(args[1]) if len(args) > 1 else 2000
    # The bare floors (served by bench.bare_wsgi), then every floor view by its path.
    paths = {"bare": "/_bench/bare-insert-wide", "bare-narrow": "/_bench/bare-insert"}
    floor_paths = {**paths, "insert": "/_bench/insert"}
    if what not in ("ingest", "ingest-v1a", "deployments", "process", *floor_paths):
        raise SystemExit(
            "python -m bench.inprocess "
            "{ingest|ingest-v1a|bare|bare-narrow|deployments|insert|process} [count]"
            " [--reset] [--relay]"
        )
    os.environ.update(stack_env())
    if reset:
        from bench.ingest import sources_create

        database_reset()
        sources_create()
    if what in paths:
        from bench.bare_wsgi import application
        from bench.views import floor_table_create, wide_floor_table_sql

        floor_table_create()
        for statement in wide_floor_table_sql():
            sql(statement)
    else:
        from config.wsgi import application

    from bench.deployments import TOKEN, deployment_requests
    from bench.ingest import signed_events

    if what == "insert":
        from bench.views import floor_table_create

        floor_table_create()
    if what == "deployments":
        from core.models import ApiClient

        if not ApiClient.objects.filter(name="bench-deployments").exists():
            manage("api_client", "create", "bench-deployments", "--token", TOKEN)

    # Event numbers no earlier run used, so that each request is a new event: past the rows
    # stored, and apart from a run a second earlier. Kept below about 10^10: an event's
    # number also sets its dates (bench.ingest.event_body).
    stored = int(sql("SELECT coalesce(max(id), 0) FROM webhooks_inboxevent")[0][0])
    first = stored * 10 + 10_000_000 + int(time.time()) % 1_000_000 * 10_000
    built = max(BUILT, WARM_UP + count)
    if what == "deployments":
        requests = deployment_requests(built, prefix=f"inprocess-{first}")
    else:
        requests = signed_events(range(first, first + built), v1a=what == "ingest-v1a")
    statuses: dict[str, int] = {}

    def call(n: int) -> None:
        request = requests[n]
        if what in floor_paths:
            request.headers["X-Bench-Id"] = f"inprocess-{first}-{n}"
            path = floor_paths[what]
        else:
            path = request.path
        answered = []
        body = application(
            _environ(request, path=path), lambda s, h, e=None: answered.append(s)
        )
        for _ in body:
            pass
        body.close()
        statuses[answered[0]] = statuses.get(answered[0], 0) + 1

    if what == "process":
        for n in range(count):
            call(n)
        return _processing_measure(
            [f"evt-bench-{n}" for n in range(first, first + count)],
            statuses,
            relay=relay,
        )
    for n in range(WARM_UP):
        call(n)

    def requests_all() -> str:
        for n in range(WARM_UP, WARM_UP + count):
            call(n)
        return str(statuses)

    _measured(what, requests_all, count=count, unit="request")
    return 0


def _measured(label: str, work: Callable[[], str], *, count: int, unit: str) -> None:
    """Runs ``work`` on this process's database connection; prints what it returns with the
    CPU of this process and of its database backend, and the WAL written, per ``unit``
    (``count`` of them), then that WAL by relation (``bench.wal``)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    span = WalRange()
    span.start()
    started, backend_started = time.process_time(), cpu_seconds(backend)
    outcome = work()
    process = time.process_time() - started
    database = cpu_seconds(backend) - backend_started
    span.stop()
    count = max(count, 1)
    print(
        f"{label}: {outcome}; per {unit}: this process {1e6 * process / count:.0f} us,"
        f" its database backend {1e6 * database / count:.0f} us,"
        f" WAL {span.written / count:,.0f} bytes"
    )
    relations = breakdown(span)
    if relations:
        report(label, relations, count)


def _processing_measure(
    event_ids: list[str], statuses: dict[str, int], *, relay: bool = False
) -> int:
    """``process``: the accepted events ``event_ids`` processed in batches, measured; with
    ``relay``, claimed by the relay first (measured apart), as a worker's messages find them."""
    from django.conf import settings

    from webhooks.models import InboxEvent
    from webhooks.processing import inbox_events_process

    ids = list(
        InboxEvent.objects.filter(event_id__in=event_ids)
        .order_by("id")
        .values_list("id", flat=True)
    )
    batch = int(os.environ.get("BENCH_INPROCESS_BATCH", settings.INBOX_BATCH_SIZE))

    def measured(label: str, work: Callable[[], str]) -> None:
        """``work`` after a vacuum and a checkpoint, so that each step pays its full-page
        images alike."""
        sql("VACUUM ANALYZE webhooks_inboxevent")
        sql("CHECKPOINT")
        _measured(label, work, count=len(ids), unit="event")

    if relay:
        measured("relay", _relay_claims)
    outcomes: dict[str, int] = {}

    def process_all() -> str:
        for start in range(0, len(ids), batch):
            for outcome in inbox_events_process(
                ids=ids[start : start + batch], worker="b"
            ):
                key = str(outcome.skipped or outcome.status)
                outcomes[key] = outcomes.get(key, 0) + 1
        return f"accepted {statuses}, processed {outcomes} in batches of {batch}"

    measured("process", process_all)
    return 0


def _relay_claims() -> str:
    """The relay's claims of every waiting row, as its rounds make them (``relay_round``'s
    transaction, the claim and its stamp), the messages built and not published."""
    from django.conf import settings
    from django.db import transaction

    from webhooks.outbox import INBOX_OUTBOX

    claimed = messages = 0
    INBOX_OUTBOX.look_everywhere()
    while True:
        with transaction.atomic():
            taken, publications = INBOX_OUTBOX.claim(settings.RELAY_BATCH_LIMIT)
        if not taken:
            break
        claimed += taken
        messages += len(publications)
    return f"claimed {claimed} rows in {messages} messages"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
