"""``make test-fast`` reuses its test databases (``--reuse-db``, tests/conftest.py): only one
that the last run left at its end and that the migration files there are now migrated, and
emptied first. A run of pytest on a database of its own shows each case."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.db import connection
from django.test import override_settings

from tests.conftest import migrations_digest

ROOT = Path(__file__).resolve().parent.parent

RECORDING_TEST = """
import json
import os
from pathlib import Path

import pytest
from django.contrib.contenttypes.models import ContentType
from django.db import connection


@pytest.mark.django_db
def test_record():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT oid, shobj_description(oid, 'pg_database'),"
            # The inbox's first partition (the partitioned table has no file of its own).
            " pg_relation_filenode('webhooks_inboxevent_p0') FROM pg_database"
            " WHERE datname = current_database()"
        )
        oid, mark, inbox_file = cursor.fetchone()
    record = {
        "name": connection.settings_dict["NAME"],
        "oid": oid,
        "mark": mark,
        "inbox_file": inbox_file,
        "left_behind": ContentType.objects.filter(app_label="left").exists(),
        "content_types": ContentType.objects.count(),
    }
    Path(os.environ["RECORD_PATH"]).write_text(json.dumps(record))
"""


@pytest.fixture
def reused(django_db_setup, tmp_path):
    """A test database of its own (named after this run's), and a way to run pytest on it with
    ``--reuse-db`` as ``make test-fast`` does; dropped at the end."""
    name = f"{connection.settings_dict['NAME']}_reused"
    settings = connection.settings_dict
    params = {
        "host": settings["HOST"] or "127.0.0.1",
        "port": settings["PORT"] or 5432,
        "user": settings["USER"],
        "password": settings["PASSWORD"] or None,
        "autocommit": True,
    }

    def admin(statement: str) -> None:
        with psycopg.connect(dbname="postgres", **params) as admin_connection:
            admin_connection.execute(statement)

    def run() -> dict:
        record = tmp_path / "record.json"
        record.unlink(missing_ok=True)
        test_file = tmp_path / "test_record.py"
        test_file.write_text(RECORDING_TEST)
        # The suite's fixtures, the database ones of tests/conftest.py among them.
        (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa\n")
        result = subprocess.run(
            [
                *(
                    sys.executable,
                    "-m",
                    "pytest",
                    "-c",
                    "pyproject.toml",
                    "--rootdir",
                    ".",
                ),
                *("-p", "no:cacheprovider", "-p", "no:xdist", "--reuse-db", "-q"),
                str(test_file),
            ],
            cwd=ROOT,
            env={**os.environ, "TEST_DATABASE_NAME": name, "RECORD_PATH": str(record)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(record.read_text())

    def sql(statement: str) -> None:
        with psycopg.connect(dbname=name, **params) as db:
            db.execute(statement)

    def mark() -> str | None:
        with psycopg.connect(dbname="postgres", **params) as db:
            return db.execute(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database"
                " WHERE datname = %s",
                [name],
            ).fetchone()[0]

    admin(f'DROP DATABASE IF EXISTS "{name}"')
    yield run, sql, mark, name
    admin(f'DROP DATABASE IF EXISTS "{name}"')


@pytest.mark.slow
def test_a_test_database_is_reused_only_when_its_mark_matches_the_migrations(reused):
    run, sql, mark, name = reused

    first = run()
    assert first["name"] == name
    assert first["mark"] is None, "set at the end of the run"
    assert mark() == migrations_digest()

    # What an interrupted run leaves: a row no test's flush removed.
    sql("INSERT INTO django_content_type (app_label, model) VALUES ('left', 'behind')")
    second = run()
    assert second["oid"] == first["oid"], "reused"
    assert not second["left_behind"], "emptied before the run"
    assert second["inbox_file"] != first["inbox_file"], "truncated: no dead rows kept"
    assert second["content_types"] == first["content_types"]
    assert second["mark"] is None, "cleared until the run ends: none if it is stopped"
    assert mark() == migrations_digest()

    # A migration file changed since the run that left it.
    sql(f"COMMENT ON DATABASE \"{name}\" IS 'migrations {'0' * 64}'")
    third = run()
    assert third["oid"] != first["oid"], "created again"
    assert mark() == migrations_digest()


def test_the_digest_changes_with_any_migration_file(tmp_path, monkeypatch):
    """The mark's digest reads every migration file: one edited, renamed or removed after it
    was applied changes it."""
    copy = tmp_path / "copied_migrations"
    shutil.copytree(ROOT / "research" / "migrations", copy)
    monkeypatch.syspath_prepend(tmp_path)
    first = sorted(copy.glob("0*.py"))[0]

    def digest() -> str | None:
        with override_settings(MIGRATION_MODULES={"research": "copied_migrations"}):
            return migrations_digest()

    applied = migrations_digest()
    assert digest() == applied, "the same files"
    first.write_text(first.read_text() + "\n# edited\n")
    edited = digest()
    assert edited != applied
    first.rename(first.with_name("0099_renamed.py"))
    renamed = digest()
    assert renamed not in {applied, edited}
    (copy / "0099_renamed.py").unlink()
    assert digest() not in {applied, edited, renamed}
