"""Webhook ingest (``POST /webhooks/<slug>/``) on gunicorn and PostgreSQL, next to the floors
measured in the same rounds: signed new events against the raw ``INSERT ... ON CONFLICT``
floor on the same server, through the product's middleware (target >= 0.8), and against the
bare floor, a plain Django view with no middleware at all doing one raw insert of a row as
wide as the inbox's (its columns, into a table with only a primary key) for the same
requests, on a server of its own with the same gunicorn settings (``bench.bare_wsgi``,
target >= 0.75); against the three-column floor, the plainest receiver on that server: the
HMAC checked, then one raw insert of ``(event_id, payload jsonb, received_at)`` (target
>= 0.8; it and the new events run back to back, which first alternating from round to round);
100% duplicates against new events (target >= 1.0). The narrow bare insert of earlier runs (the
id and the body alone) is measured beside them, without a target.
The product path is complete: signature check, envelope validation, the one upsert and the
commit; no broker call (a worker's relay publishes the row; none runs here).

Verification's cost: in each round the same new events are also sent signed with Ed25519
(Standard Webhooks ``v1a``) to a source that holds the producer's public key, right next to
the ``v1`` HMAC ones (the order alternating from round to round), and reported against them:
the ratio v1a / v1, no target.

Run alone: ``python -m bench.ingest`` (BENCH_DATABASE_URL, BENCH_BROKER_URL, BENCH_SECONDS);
``python -m bench.ingest v1a [ROUNDS]`` measures only the v1 and v1a new events (no floors,
3 rounds unless given), to try that piece at a small size.
"""

from __future__ import annotations

import json
import sys
import time

from bench.harness import (
    BENCH_CONNECTIONS,
    BENCH_SECONDS,
    BenchContext,
    Figure,
    LoadResult,
    Request,
    autovacuum_off,
    broker_purge,
    database_reset,
    django_setup,
    floors_measure,
    load_run,
    manage,
    median,
    report,
    round_ratios,
    sql,
)
from bench.views import (
    BENCH_WEBHOOK_SECRET,
    FLOOR_TABLE,
    HMAC_FLOOR_TABLE,
    WIDE_FLOOR_TABLE,
    hmac_floor_table_sql,
    wide_floor_table_sql,
)
from tests.integrations.research.factories import research_event
from webhooks.schemes import public_key_of, signature_headers

SLUG = "bench"
SECRET = BENCH_WEBHOOK_SECRET  # the three-column floor checks the same signatures
# The source of the v1a deliveries, which holds the public key of this benchmark-only
# producer key (whsk_ + base64 of a 32-byte seed): fixed, so that bench.inprocess signs for
# the source a run of this module left.
SLUG_V1A = "bench-v1a"
V1A_PRIVATE_KEY = "whsk_YmVuY2gtb25seS1lZDI1NTE5LXNlZWQtMDEyMzQ1Njc="
DUPLICATE_POOL = 2000
ROUNDS = 5  # medians of interleaved rounds: the machine is shared, its disk too (fsync)


def event_body(n: int) -> bytes:
    """Event ``n``, the same content on every call: a second call is a redelivery."""
    body = research_event(
        number=n,
        event_id=f"evt-bench-{n}",
        entity_id=f"doc-{n % 5000}",
        source_version=n,
        producer="bench",
    )
    return json.dumps(body, separators=(",", ":")).encode()


def signed_events(
    numbers, *, timestamp: int | None = None, v1a: bool = False
) -> list[Request]:
    """Signed deliveries of events ``numbers`` (``event_body``) to the bench source: ``v1``
    HMAC ones, or with ``v1a`` Ed25519 ones to the source that holds the public key."""
    django_setup()
    now = int(time.time()) if timestamp is None else timestamp
    slug, scheme, secret = (
        (SLUG_V1A, "standard-webhooks", V1A_PRIVATE_KEY)
        if v1a
        else (SLUG, "hmac-sha256", SECRET)
    )
    return [
        signed_delivery(
            event_body(n),
            event_id=f"evt-bench-{n}",
            timestamp=now,
            slug=slug,
            scheme=scheme,
            secret=secret,
        )
        for n in numbers
    ]


def signed_delivery(
    raw: bytes,
    *,
    event_id: str,
    timestamp: int,
    slug: str = SLUG,
    scheme: str = "hmac-sha256",
    secret: str = SECRET,
) -> Request:
    """One delivery of the body ``raw`` as event ``event_id``, signed for source ``slug``."""
    headers = signature_headers(
        scheme=scheme,
        secret=secret,
        raw_body=raw,
        event_id=event_id,
        timestamp=timestamp,
    )
    headers["Content-Type"] = "application/json"
    return Request("POST", f"/webhooks/{slug}/", headers, raw)


def sources_create() -> None:
    """The bench source (``v1`` HMAC) and the one that holds the v1a producer's public key."""
    manage(
        "webhook_source", "create", SLUG, "--handler", "research", "--secret", SECRET
    )
    manage(
        "webhook_source",
        "create",
        SLUG_V1A,
        "--scheme",
        "standard-webhooks",
        "--handler",
        "research",
        "--public-key",
        public_key_of(V1A_PRIVATE_KEY),
    )


def _check(result: LoadResult, *, expected: str, what: str) -> None:
    others = {k: v for k, v in result.statuses.items() if k != expected}
    if others or result.socket_errors:
        raise RuntimeError(
            f"{what}: unexpected answers {others}, socket errors {result.socket_errors}"
        )


def bare_floor_requests(numbers, *, path: str = "/_bench/bare-insert") -> list[Request]:
    """The bare floor's requests: the same signed deliveries, bytes and headers, each with an
    id of its own for the floor's insert; ``path``: the narrow insert or the wide one
    (``/_bench/bare-insert-wide``)."""
    requests = []
    for request in signed_events(numbers):
        headers = {**request.headers, "X-Bench-Id": f"bare-{len(requests)}"}
        requests.append(Request("POST", path, headers, request.body))
    return requests


def _bare_run(bare_base: str, path: str, *, first: int, count: int, seconds: float):
    result = load_run(
        f"{bare_base}{path}",
        requests_=bare_floor_requests(range(first, first + count), path=path),
        seconds=seconds,
    )
    _check(result, expected="202", what=f"bare floor {path}")
    if result.wrapped:
        raise RuntimeError(f"the bare floor's list ({path}) wrapped: raise its size")
    return result


def _hmac_floor_run(bare_base: str, numbers: range, *, seconds: float) -> LoadResult:
    """The three-column floor on the signed deliveries of events ``numbers``, each sent once:
    every answer a 202 (a signature it refused would be a 401) and every 202 a row."""
    path = "/_bench/bare-insert-hmac"
    requests_ = [
        Request("POST", path, request.headers, request.body)
        for request in signed_events(numbers)
    ]
    result = load_run(f"{bare_base}{path}", requests_=requests_, seconds=seconds)
    _check(result, expected="202", what="three-column floor")
    if result.wrapped:
        raise RuntimeError("the three-column floor's list wrapped: raise its size")
    _rows_check(
        result,
        sql(f"SELECT count(*) FROM {HMAC_FLOOR_TABLE}")[0][0],  # noqa: S608
        what="three-column floor",
    )
    return result


def _round(
    base: str,
    bare_base: str,
    *,
    first: int,
    seconds: float,
    vacuum: bool,
    v1a_first: bool = False,
    hmac_floor_first: bool = False,
) -> dict[str, LoadResult]:
    """One round: the floors, then new events, then duplicates, back to back, so that a
    neighbour's load on the machine hits every figure of the round alike. With ``vacuum``
    (a server with autovacuum off), the inbox is vacuumed and analyzed first, outside every
    measured window: the duplicates of the round before left a dead version of each row they
    counted, which autovacuum would have removed."""
    if vacuum:
        sql("VACUUM (ANALYZE) webhooks_inboxevent")
    floors = floors_measure(base, seconds=seconds)
    sql(f"TRUNCATE {FLOOR_TABLE}")
    sql(f"TRUNCATE {WIDE_FLOOR_TABLE}")
    sql(f"TRUNCATE {HMAC_FLOOR_TABLE}")
    count = int(floors["raw_insert"].rps * seconds * 3) + 2000
    bare = _bare_run(
        bare_base, "/_bench/bare-insert-wide", first=first, count=count, seconds=seconds
    )
    narrow = _bare_run(
        bare_base, "/_bench/bare-insert", first=first, count=count, seconds=seconds
    )

    # New events: every request a new signed event id, sent once (``wrapped`` must stay 0);
    # the same events signed v1a to the other source, before or after (by round).
    # The three-column floor right before or right after them (by round), on the same events.
    count = int(floors["raw_insert"].rps * seconds * 2) + 2000
    numbers = range(first, first + count)
    new_v1a = None
    if v1a_first:
        new_v1a = new_events_run(base, numbers, seconds=seconds, v1a=True)
    hmac_floor = None
    if hmac_floor_first:
        hmac_floor = _hmac_floor_run(bare_base, numbers, seconds=seconds)
    new = new_events_run(base, numbers, seconds=seconds)
    if hmac_floor is None:
        hmac_floor = _hmac_floor_run(bare_base, numbers, seconds=seconds)
    if new_v1a is None:
        new_v1a = new_events_run(base, numbers, seconds=seconds, v1a=True)

    # 100% duplicates: deliveries of events already stored (same content, new signature),
    # of the source they are sent to: the v1a run may have reached event numbers the v1 run
    # did not, and those would be new events to the v1 source.
    stored_ids = sql(
        "SELECT e.event_id FROM webhooks_inboxevent e"
        " JOIN webhooks_webhooksource s ON s.id = e.source_id"
        " WHERE s.slug = %s ORDER BY e.id DESC LIMIT %s",
        [SLUG, DUPLICATE_POOL],
    )
    pool = [int(event_id.removeprefix("evt-bench-")) for (event_id,) in stored_ids]
    duplicates = load_run(
        f"{base}/webhooks/{SLUG}/", requests_=signed_events(pool), seconds=seconds
    )
    _check(duplicates, expected="200", what="duplicates")
    broker_purge()
    return {
        **floors,
        "bare_insert": bare,
        "bare_insert_narrow": narrow,
        "bare_insert_hmac": hmac_floor,
        "new": new,
        "new_v1a": new_v1a,
        "duplicates": duplicates,
        "next": first + count,
    }


def new_events_run(
    base: str, numbers: range, *, seconds: float, v1a: bool = False
) -> LoadResult:
    """New events ``numbers``, each sent once, signed ``v1`` to the bench source or ``v1a``
    to the public-key one; every answer a 202 and every 202 a row."""
    slug, what = (SLUG_V1A, "v1a new events") if v1a else (SLUG, "new events")
    before = sql(
        "SELECT count(*) FROM webhooks_inboxevent e JOIN webhooks_webhooksource s"
        " ON s.id = e.source_id WHERE s.slug = %s",
        [slug],
    )[0][0]
    result = load_run(
        f"{base}/webhooks/{slug}/",
        requests_=signed_events(numbers, v1a=v1a),
        seconds=seconds,
    )
    _check(result, expected="202", what=what)
    if result.wrapped:
        raise RuntimeError(f"the {what} list wrapped: raise its size")
    stored = (
        sql(
            "SELECT count(*) FROM webhooks_inboxevent e JOIN webhooks_webhooksource s"
            " ON s.id = e.source_id WHERE s.slug = %s",
            [slug],
        )[0][0]
        - before
    )
    _rows_check(result, stored, what=what)
    return result


def _rows_check(result: LoadResult, stored: int, *, what: str) -> None:
    """Every answer 202 of ``result`` is one of the ``stored`` new rows; requests in flight
    when wrk stops are committed but not counted by wrk."""
    accepted = result.statuses.get("202", 0)
    if not accepted <= stored <= accepted + BENCH_CONNECTIONS:
        raise RuntimeError(f"{what}: {stored} rows for {accepted} answers 202")


def v1a_figures(rounds: list[dict[str, LoadResult]]) -> list[Figure]:
    """Ed25519 (v1a) new events against the v1 HMAC ones of the same rounds."""

    def med(name: str, attr: str) -> float:
        return median([getattr(r[name], attr) for r in rounds])

    figures = [
        Figure(
            "ingest",
            "signed new events, v1a Ed25519 / v1 HMAC, no target",
            med("new_v1a", "rps"),
            "req/s",
            floor_name="v1 new events",
            floor_value=med("new", "rps"),
            round_ratios=round_ratios(
                [r["new_v1a"] for r in rounds], [r["new"] for r in rounds]
            ),
        )
    ]
    for pct in ("p50", "p99"):
        figures.append(
            Figure(
                "ingest",
                f"signed new events, v1a Ed25519 {pct}",
                med("new_v1a", f"{pct}_ms"),
                "ms",
                floor_name=f"v1 new events {pct}",
                floor_value=med("new", f"{pct}_ms"),
                higher_is_better=False,
            )
        )
    return figures


def run(ctx: BenchContext) -> list[Figure]:
    broker_purge()
    sources_create()
    for statement in wide_floor_table_sql() + hmac_floor_table_sql():
        sql(statement)
    base = ctx.gunicorn()
    bare_base = ctx.gunicorn(app="bench.bare_wsgi")
    seconds = max(BENCH_SECONDS / 2, 3)
    vacuum = autovacuum_off()
    if vacuum:
        print(
            "[ingest] the server runs with autovacuum off: the inbox is vacuumed and "
            "analyzed before each round, outside the measured windows, as autovacuum would",
            flush=True,
        )
    rounds = []
    first = 0
    for number in range(ROUNDS):
        result = _round(
            base,
            bare_base,
            first=first,
            seconds=seconds,
            vacuum=vacuum,
            v1a_first=number % 2 == 1,
            hmac_floor_first=number % 2 == 0,
        )
        first = result.pop("next")
        rounds.append(result)

    def med(name: str, attr: str) -> float:
        return median([getattr(r[name], attr) for r in rounds])

    def paired(name: str, floor: str) -> list[float]:
        return round_ratios([r[name] for r in rounds], [r[floor] for r in rounds])

    per_round = [{k: v.as_dict() for k, v in r.items()} for r in rounds]
    new_rps, dup_rps = med("new", "rps"), med("duplicates", "rps")
    figures = [
        Figure(
            "ingest",
            "signed new events req/s",
            new_rps,
            "req/s",
            floor_name="raw_insert",
            floor_value=med("raw_insert", "rps"),
            target_ratio=0.8,
            extra={"rounds": per_round, "bare_rps": med("bare", "rps")},
            round_ratios=paired("new", "raw_insert"),
        ),
        Figure(
            "ingest",
            "signed new events / bare floor, no middleware, a row as wide as the inbox's",
            new_rps,
            "req/s",
            floor_name="bare_insert",
            floor_value=med("bare_insert", "rps"),
            target_ratio=0.75,
            round_ratios=paired("new", "bare_insert"),
        ),
        Figure(
            "ingest",
            "signed new events / three-column floor: HMAC, then (event_id, payload jsonb,"
            " received_at)",
            new_rps,
            "req/s",
            floor_name="bare_insert_hmac",
            floor_value=med("bare_insert_hmac", "rps"),
            target_ratio=0.8,
            round_ratios=paired("new", "bare_insert_hmac"),
        ),
        Figure(
            "ingest",
            "signed new events / narrow bare insert (id and body), no target",
            new_rps,
            "req/s",
            floor_name="bare_insert_narrow",
            floor_value=med("bare_insert_narrow", "rps"),
            round_ratios=paired("new", "bare_insert_narrow"),
        ),
        Figure(
            "ingest",
            "100% duplicates req/s",
            dup_rps,
            "req/s",
            floor_name="new events",
            floor_value=new_rps,
            target_ratio=1.0,
            round_ratios=paired("duplicates", "new"),
        ),
    ]
    for name, label in (
        ("new", "signed new events"),
        ("duplicates", "100% duplicates"),
    ):
        for pct in ("p50", "p99"):
            figures.append(
                Figure(
                    "ingest",
                    f"{label} {pct}",
                    med(name, f"{pct}_ms"),
                    "ms",
                    floor_name=f"raw_insert {pct}",
                    floor_value=med("raw_insert", f"{pct}_ms"),
                    higher_is_better=False,
                )
            )
    return figures + v1a_figures(rounds)


def v1a_run(ctx: BenchContext, *, rounds: int = 3) -> list[Figure]:
    """The v1a figure alone: ``rounds`` rounds of v1 and v1a new events, no floors."""
    broker_purge()
    sources_create()
    base = ctx.gunicorn()
    seconds = max(BENCH_SECONDS / 2, 3)
    results = []
    first = 0
    count = int(3000 * seconds) + 2000  # more than this machine accepts in the window
    for number in range(rounds):
        sql("VACUUM (ANALYZE) webhooks_inboxevent")
        numbers = range(first, first + count)
        measured = {}
        for v1a in (number % 2 == 1, number % 2 == 0):
            name = "new_v1a" if v1a else "new"
            measured[name] = new_events_run(base, numbers, seconds=seconds, v1a=v1a)
        results.append(measured)
        first += count
    return v1a_figures(results)


def main(argv: list[str]) -> None:
    database_reset()
    with BenchContext() as ctx:
        if argv and argv[0] == "v1a":
            rounds = int(argv[1]) if len(argv) > 1 else 3
            report(v1a_run(ctx, rounds=rounds), name="ingest-v1a")
        else:
            report(run(ctx), name="ingest")


if __name__ == "__main__":
    main(sys.argv[1:])
