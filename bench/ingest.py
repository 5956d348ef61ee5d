"""Webhook ingest (``POST /webhooks/<slug>/``) on gunicorn and PostgreSQL, next to the floors
measured on the same server in the same run: signed new events against the raw
``INSERT ... ON CONFLICT`` floor (target >= 0.6), and 100% duplicates against new events
(target >= 0.9). The product path is complete: signature check, envelope validation, the one
upsert, the commit and the publish of the processing task to the broker (no worker consumes it).

Run alone: ``python -m bench.ingest`` (BENCH_DATABASE_URL, BENCH_BROKER_URL, BENCH_SECONDS).
"""

from __future__ import annotations

import json
import time

from bench.harness import (
    BENCH_CONNECTIONS,
    BENCH_SECONDS,
    BenchContext,
    Figure,
    LoadResult,
    Request,
    broker_purge,
    database_reset,
    floors_measure,
    load_run,
    manage,
    report,
    sql,
)
from webhooks.schemes import signature_headers

SLUG = "bench"
SECRET = "bench-webhook-secret-0123456789abcdef"  # noqa: S105 - a benchmark-only secret
DUPLICATE_POOL = 2000


def _event(n: int) -> bytes:
    body = {
        "event_id": f"evt-bench-{n}",
        "event_type": "research.document.updated",
        "occurred_at": "2026-11-30T12:00:00Z",
        "delivered_at": "2026-11-30T12:00:01Z",
        "delivery_attempt": 1,
        "producer": "bench",
        "entity": {
            "entity_id": f"doc-{n % 5000}",
            "entity_type": "research_document",
            "source_version": n,
        },
        "source": {
            "url": f"https://example.org/papers/{n}",
            "title": "A benchmark document",
            "content_hash": f"sha256:{n:064x}",
        },
        "data": {
            "summary": "Benchmark payload.",
            "authors": ["A. B."],
            "citations": [],
        },
    }
    return json.dumps(body, separators=(",", ":")).encode()


def _signed(numbers) -> list[Request]:
    now = int(time.time())
    requests = []
    for n in numbers:
        raw = _event(n)
        headers = signature_headers(
            scheme="hmac-sha256",
            secret=SECRET,
            raw_body=raw,
            event_id=f"evt-bench-{n}",
            timestamp=now,
        )
        headers["Content-Type"] = "application/json"
        requests.append(Request("POST", f"/webhooks/{SLUG}/", headers, raw))
    return requests


def _check(result: LoadResult, *, expected: str, what: str) -> None:
    others = {k: v for k, v in result.statuses.items() if k != expected}
    if others or result.socket_errors:
        raise RuntimeError(
            f"{what}: unexpected answers {others}, socket errors {result.socket_errors}"
        )


def run(ctx: BenchContext) -> list[Figure]:
    broker_purge()
    manage(
        "webhook_source", "create", SLUG, "--handler", "research", "--secret", SECRET
    )
    base = ctx.gunicorn(workers=2)
    floors = floors_measure(base)
    insert_floor = floors["raw_insert"]

    # New events: every request a new signed event id, sent once (``wrapped`` must stay 0).
    count = int(insert_floor.rps * BENCH_SECONDS * 2) + 2000
    new = load_run(f"{base}/webhooks/{SLUG}/", requests_=_signed(range(count)))
    _check(new, expected="202", what="new events")
    if new.wrapped:
        raise RuntimeError("the new-event list wrapped: raise its size")
    stored = sql("SELECT count(*) FROM webhooks_inboxevent")[0][0]
    accepted = new.statuses.get("202", 0)
    # Requests in flight when wrk stops are committed but not counted by wrk.
    if not accepted <= stored <= accepted + BENCH_CONNECTIONS:
        raise RuntimeError(f"{stored} rows for {accepted} answers 202")

    # 100% duplicates: deliveries of events already stored (same content, new signature).
    duplicates = load_run(
        f"{base}/webhooks/{SLUG}/", requests_=_signed(range(DUPLICATE_POOL))
    )
    _check(duplicates, expected="200", what="duplicates")
    broker_purge()

    return [
        Figure(
            "ingest",
            "signed new events req/s",
            new.rps,
            "req/s",
            floor_name="raw_insert",
            floor_value=insert_floor.rps,
            target_ratio=0.6,
            extra={
                "load": new.as_dict(),
                "floors": {k: v.as_dict() for k, v in floors.items()},
            },
        ),
        Figure(
            "ingest",
            "signed new events p50",
            new.p50_ms,
            "ms",
            floor_name="raw_insert p50",
            floor_value=insert_floor.p50_ms,
            higher_is_better=False,
        ),
        Figure(
            "ingest",
            "signed new events p99",
            new.p99_ms,
            "ms",
            floor_name="raw_insert p99",
            floor_value=insert_floor.p99_ms,
            higher_is_better=False,
        ),
        Figure(
            "ingest",
            "100% duplicates req/s",
            duplicates.rps,
            "req/s",
            floor_name="new events",
            floor_value=new.rps,
            target_ratio=0.9,
            extra={"load": duplicates.as_dict()},
        ),
        Figure(
            "ingest",
            "100% duplicates p50",
            duplicates.p50_ms,
            "ms",
            floor_name="new events p50",
            floor_value=new.p50_ms,
            higher_is_better=False,
        ),
        Figure(
            "ingest",
            "100% duplicates p99",
            duplicates.p99_ms,
            "ms",
            floor_name="new events p99",
            floor_value=new.p99_ms,
            higher_is_better=False,
        ),
    ]


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="ingest")


if __name__ == "__main__":
    main()
