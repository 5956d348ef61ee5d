"""The floors alone: a bare endpoint and a raw INSERT ... ON CONFLICT endpoint on gunicorn;
and what a ``NOTIFY`` in the inserting transaction would cost the raw insert, with a
connection ``LISTEN``ing as a relay woken that way would (docs/bench-log/2026-11-30.md, "Waking the
relay")."""

import json

import psycopg

from bench.harness import (
    BENCH_DATABASE_URL,
    BENCH_SECONDS,
    BenchContext,
    Figure,
    Request,
    database_reset,
    floors_measure,
    load_run,
    median,
    report,
    sql,
)
from bench.views import FLOOR_TABLE

ROUNDS = 2


def _inserts(path: str, count: int, tag: str):
    body = json.dumps({"event_id": "x", "data": {"summary": "floor"}}).encode()
    return (
        Request("POST", path, {"X-Bench-Id": f"{tag}-{i}"}, body) for i in range(count)
    )


def run(ctx: BenchContext) -> list[Figure]:
    base = ctx.gunicorn()
    floors = floors_measure(base)
    bare, insert = floors["bare"], floors["raw_insert"]
    # A listener, as a relay woken by notifications would hold: without one, PostgreSQL
    # drops the notifications and the figure would flatter NOTIFY.
    listener = psycopg.connect(BENCH_DATABASE_URL, autocommit=True)
    listener.execute("LISTEN bench_inbox")
    inserts, notifies = [], []
    try:
        for round_ in range(ROUNDS):
            count = int(insert.rps * BENCH_SECONDS * 2) + 1000
            sql(f"TRUNCATE {FLOOR_TABLE}")
            inserts.append(
                load_run(
                    f"{base}/_bench/insert",
                    requests_=_inserts("/_bench/insert", count, f"i{round_}"),
                )
            )
            sql(f"TRUNCATE {FLOOR_TABLE}")
            notifies.append(
                load_run(
                    f"{base}/_bench/insert-notify",
                    requests_=_inserts("/_bench/insert-notify", count, f"n{round_}"),
                )
            )
            # Drain what the listener received, as a relay would.
            for _ in listener.notifies(timeout=0.5, stop_after=10**9):
                pass
    finally:
        listener.close()
    insert_rps = median([r.rps for r in inserts])
    notify_rps = median([r.rps for r in notifies])
    return [
        Figure(
            "floors", "bare endpoint req/s", bare.rps, "req/s", extra=bare.as_dict()
        ),
        Figure(
            "floors",
            "raw INSERT ON CONFLICT req/s",
            insert.rps,
            "req/s",
            floor_name="bare",
            floor_value=bare.rps,
            extra=insert.as_dict(),
        ),
        Figure(
            "floors",
            "raw INSERT + NOTIFY, a listener open, req/s",
            notify_rps,
            "req/s",
            floor_name="raw INSERT",
            floor_value=insert_rps,
            extra={
                "inserts": [r.as_dict() for r in inserts],
                "notifies": [r.as_dict() for r in notifies],
            },
        ),
    ]


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="floors")


if __name__ == "__main__":
    main()
