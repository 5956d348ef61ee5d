"""Idempotent CI/CD triggers: POST /api/deployments/ with new keys and with replayed keys,
next to the floors (bare endpoint, raw INSERT ... ON CONFLICT) on the same gunicorn server.

Targets (issue 8): replays >= 90% of the raw-insert floor (a replay is one indexed read),
new operations >= 50% (record + deployment in one transaction, a publish after commit).
No worker runs: the published messages wait in the bench broker and are dropped at the end.

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
    report,
    sql,
)

TOKEN = "bench-token-deployments-0123456789abcdef"  # noqa: S105 - bench-only database


def _requests(prefix: str, count: int) -> list[Request]:
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


def run(ctx: BenchContext) -> list[Figure]:
    manage("api_client", "create", "bench-deployments", "--token", TOKEN)
    base = ctx.gunicorn(workers=2)
    floors = floors_measure(base)
    bare, insert = floors["bare"], floors["raw_insert"]

    count = int(insert.rps * BENCH_SECONDS * 1.5) + 1000
    new_requests = _requests("new", count)
    new = load_run(f"{base}/api/deployments/", requests_=new_requests)
    time.sleep(3)  # requests wrk gave up on may still commit: count after they have
    created = sql("SELECT count(*) FROM deployments_deployment")[0][0]

    # Replays of the keys just created (each one a lookup of a committed record).
    created_keys = {
        key for (key,) in sql("SELECT idempotency_key FROM deployments_deployment")
    }
    replayed_requests = [
        req for req in new_requests if req.headers["Idempotency-Key"] in created_keys
    ]
    replay = load_run(f"{base}/api/deployments/", requests_=replayed_requests)
    time.sleep(3)
    after = sql("SELECT count(*) FROM deployments_deployment")[0][0]
    broker_purge()

    def figure(name, result, *, target, floor=insert, floor_name="raw_insert"):
        return Figure(
            "deployments",
            name,
            result.rps,
            "req/s",
            floor_name=floor_name,
            floor_value=floor.rps,
            target_ratio=target,
            extra=result.as_dict(),
        )

    return [
        Figure("deployments", "floor: bare endpoint req/s", bare.rps, "req/s"),
        figure(
            "floor: raw INSERT ON CONFLICT req/s",
            insert,
            target=None,
            floor=bare,
            floor_name="bare",
        ),
        figure("POST /api/deployments/ new keys req/s", new, target=0.5),
        figure("POST /api/deployments/ replays req/s", replay, target=0.9),
        figure(
            "POST /api/deployments/ new keys vs bare",
            new,
            target=None,
            floor=bare,
            floor_name="bare",
        ),
        Figure(
            "deployments",
            "deployments created by the replay run",
            after - created,
            "rows",
            extra={"created_by_new_run": created},
        ),
    ]


def main() -> None:
    database_reset()
    with BenchContext() as ctx:
        report(run(ctx), name="deployments")


if __name__ == "__main__":
    main()
