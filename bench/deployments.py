"""Idempotent CI/CD triggers: POST /api/deployments/ with new keys and with replayed keys,
next to the floors (bare endpoint, raw INSERT ... ON CONFLICT) on the same gunicorn server.

Targets: replays >= 90% of the raw-insert floor (a replay is the new key's one statement
meeting the key's record, which it returns: nothing written), new operations >= 60% (record +
deployment in one statement; no broker call: a worker's relay publishes the job). No worker
runs, so nothing is published.

    python -m bench.deployments        # JSON in var/bench/deployments.json
"""

from __future__ import annotations

import json
import time

from bench.harness import (
    BENCH_SECONDS,
    BenchContext,
    Figure,
    Request,
    broker_purge,
    database_reset,
    floors_measure,
    load_run,
    manage,
    median,
    report,
    round_ratios,
    sql,
)
from bench.views import FLOOR_TABLE

ROUNDS = 4  # medians of interleaved rounds: the machine is shared, its speed drifts
TOKEN = "bench-token-deployments-0123456789abcdef"  # noqa: S105 - bench-only database


def deployment_requests(count: int, *, prefix: str) -> list[Request]:
    """``count`` new deployment requests, keys ``<prefix>-<n>``."""
    body = json.dumps(
        {
            "repository": "acme/payment-service",
            "commit_sha": "abc123def456",
            "environment": "staging",
            "workflow": "deploy.yml",
            "triggered_by": "bench",
        },
        separators=(",", ":"),
    ).encode()
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
    }
    return [
        Request(
            "POST",
            "/api/deployments/",
            {**headers, "Idempotency-Key": f"{prefix}-{i}"},
            body,
        )
        for i in range(count)
    ]


def _keys_created() -> set[str]:
    return {
        key
        for (key,) in sql(
            "SELECT idempotency_key FROM deployments_job WHERE kind = 'deployment'"
        )
    }


def run(ctx: BenchContext) -> list[Figure]:
    manage("api_client", "create", "bench-deployments", "--token", TOKEN)
    base = ctx.gunicorn()
    url = f"{base}/api/deployments/"
    floors = floors_measure(base)
    bare = floors["bare"]
    # The machine is shared and its load drifts: the raw-insert floor, new keys and replays are
    # measured in alternating rounds, each compared with its own round's floor; the ratio is
    # the median of the rounds' (docs/benchmarks.md, "How to read it").
    inserts, news, replays, auths = [floors["raw_insert"]], [], [], []
    created_by_replays = 0
    for round_ in range(ROUNDS):
        if round_:
            sql(f"TRUNCATE {FLOOR_TABLE}")
            count = int(inserts[-1].rps * BENCH_SECONDS * 1.5) + 1000
            floor_requests = (
                Request(
                    "POST", "/_bench/insert", {"X-Bench-Id": f"r{round_}-{i}"}, b"{}"
                )
                for i in range(count)
            )
            inserts.append(load_run(f"{base}/_bench/insert", requests_=floor_requests))
        count = int(inserts[-1].rps * BENCH_SECONDS * 1.5) + 1000
        new_requests = deployment_requests(count, prefix=f"new{round_}")
        news.append(load_run(url, requests_=new_requests))
        time.sleep(3)  # requests wrk gave up on may still commit: count after they have
        created = _keys_created()
        replayed = [r for r in new_requests if r.headers["Idempotency-Key"] in created]
        replays.append(load_run(url, requests_=replayed))
        time.sleep(3)
        created_by_replays += len(_keys_created()) - len(created)
        broker_purge()
        # What any Bearer-authenticated DRF request costs before the view does anything: the
        # ceiling a replay (that plus one indexed read) can approach.
        whoami = Request("GET", "/api/whoami/", {"Authorization": f"Bearer {TOKEN}"})
        auths.append(load_run(f"{base}/api/whoami/", requests_=[whoami] * 1000))

    insert_rps = median([r.rps for r in inserts])
    new_rps = median([r.rps for r in news])
    replay_rps = median([r.rps for r in replays])
    auth_rps = median([r.rps for r in auths])
    runs = {
        "raw_insert": [r.as_dict() for r in inserts],
        "new": [r.as_dict() for r in news],
        "replay": [r.as_dict() for r in replays],
    }
    return [
        Figure("deployments", "floor: bare endpoint req/s", bare.rps, "req/s"),
        Figure(
            "deployments",
            "floor: raw INSERT ON CONFLICT req/s",
            insert_rps,
            "req/s",
            floor_name="bare",
            floor_value=bare.rps,
            extra={"runs": runs["raw_insert"]},
        ),
        Figure(
            "deployments",
            "POST /api/deployments/ new keys req/s",
            new_rps,
            "req/s",
            floor_name="raw_insert",
            floor_value=insert_rps,
            target_ratio=0.6,
            extra={"runs": runs["new"]},
            round_ratios=round_ratios(news, inserts),
        ),
        Figure(
            "deployments",
            "POST /api/deployments/ replays req/s",
            replay_rps,
            "req/s",
            floor_name="raw_insert",
            floor_value=insert_rps,
            target_ratio=0.9,
            extra={"runs": runs["replay"]},
            round_ratios=round_ratios(replays, inserts),
        ),
        Figure(
            "deployments",
            "GET /api/whoami/ (Bearer auth only) req/s",
            auth_rps,
            "req/s",
            floor_name="raw_insert",
            floor_value=insert_rps,
            extra={"runs": [r.as_dict() for r in auths]},
            round_ratios=round_ratios(auths, inserts),
        ),
        Figure(
            "deployments",
            "replays vs the Bearer-auth-only request",
            replay_rps,
            "req/s",
            floor_name="whoami",
            floor_value=auth_rps,
            round_ratios=round_ratios(replays, auths),
        ),
        Figure(
            "deployments",
            "deployments created by replays (must be 0)",
            created_by_replays,
            "rows",
        ),
    ]


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="deployments")


if __name__ == "__main__":
    main()
