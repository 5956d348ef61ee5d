"""Migration 0009 (one job table) at 1,000,000 jobs (docs/subsystems/executors.md, "Migration
0009: one job table"): a scratch database at deployments 0008 is filled with deployments and
builds (half each, ``BENCH_JOB_MIGRATION_JOBS`` in all) and one transition per job, written
by SQL; then the migration runs forward and back, each timed.

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/wt_bench python -m bench.job_migration

The database is dropped and created again first: never point it at one that matters."""

from __future__ import annotations

import os
import time

from bench.harness import database_reset, django_setup

JOBS = int(os.environ.get("BENCH_JOB_MIGRATION_JOBS", "1000000"))
BEFORE = "0008_deploy_target_clients_and_tests"
AFTER = "0009_one_job_table"
# Rows written per statement while filling.
FILL_BATCH = 100_000


def _migrate(target: str) -> float:
    from django.core.management import call_command

    started = time.monotonic()
    call_command("migrate", "deployments", target, verbosity=0)
    return time.monotonic() - started


def _copies(table: str, template: int, count: int, prefix: str) -> None:
    """``count`` copies of row ``template`` of ``table``, each with its own public id and
    key, in statements of ``FILL_BATCH`` rows."""
    from django.db import connection

    with connection.cursor() as cursor:
        description = connection.introspection.get_table_description(cursor, table)
        columns = [
            c.name
            for c in description
            if c.name not in ("id", "public_id", "idempotency_key")
        ]
        listed = ", ".join(columns)
        for start in range(0, count, FILL_BATCH):
            cursor.execute(
                f"INSERT INTO {table} (public_id, idempotency_key, {listed})"  # noqa: S608
                f" SELECT %s || lpad(g::text, 24, '0'), 'k-' || g, {listed}"
                f" FROM {table}, generate_series(%s::bigint, %s::bigint) AS g WHERE id = %s",
                [prefix, start + 1, min(start + FILL_BATCH, count), template],
            )


def _fill(jobs: int) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from core.models import ApiClient

    old = MigrationExecutor(connection).loader.project_state(("deployments", BEFORE))
    apps = old.apps
    # No token: the jobs' client is never authenticated here.
    client = ApiClient.objects.create(name="bench", token_hash="0" * 64)
    common = {
        "client_id": client.pk,
        "repository": "acme/shop",
        "commit_sha": "a" * 40,
        "status": "running",
    }
    deployment = apps.get_model("deployments", "Deployment").objects.create(
        public_id="dep_template", idempotency_key="t", environment="prod", **common
    )
    build = apps.get_model("deployments", "Build").objects.create(
        public_id="bld_template", idempotency_key="t", ref="main", **common
    )
    _copies("deployments_deployment", deployment.pk, jobs // 2 - 1, "dep_")
    _copies("deployments_build", build.pk, jobs - jobs // 2 - 1, "bld_")
    with connection.cursor() as cursor:
        for kind in ("deployment", "build"):
            cursor.execute(
                "INSERT INTO deployments_jobtransition"  # noqa: S608
                f" ({kind}_id, from_status, to_status, at, actor, detail, recorded_at)"
                " SELECT id, 'queued', 'running', now(), 'worker:bench/1', '', now()"
                f" FROM deployments_{kind}"
            )
        cursor.execute("ANALYZE")


def _digest() -> list:
    """A digest of every row of the three tables the round trip must give back as they were
    (each row as text, hashed, summed)."""
    from django.db import connection

    found = []
    with connection.cursor() as cursor:
        for table in (
            "deployments_deployment",
            "deployments_build",
            "deployments_jobtransition",
        ):
            cursor.execute(
                f"SELECT count(*), sum(hashtextextended(t::text, 0)) FROM {table} t"  # noqa: S608
            )
            found.append((table, *cursor.fetchone()))
    return found


def main() -> None:
    django_setup()
    database_reset()
    _migrate(BEFORE)
    started = time.monotonic()
    _fill(JOBS)
    print(
        f"filled {JOBS} jobs and {JOBS} transitions: {time.monotonic() - started:.0f} s"
    )
    before = _digest()
    print(f"forward (0008 -> 0009): {_migrate(AFTER):.0f} s")
    print(f"back (0009 -> 0008): {_migrate(BEFORE):.0f} s")
    after = _digest()
    print(f"every row as it was: {before == after}")
    if before != after:
        raise SystemExit(f"{before} != {after}")


if __name__ == "__main__":
    main()
