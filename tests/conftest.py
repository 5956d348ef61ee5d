import hashlib
import importlib.util
import subprocess
import weakref
from pathlib import Path

import django
import pytest

from audit.roles import AUDITORS, OPERATORS, roles_bootstrap
from core.actors import Actor
from tests.console import make_user
from tests.core.factories import bearer_http
from tests.integrations.github.factories import github_source_create
from tests.webhooks.factories import research_source
from trail.api_clients import api_client_create
from webhooks.partitions import inbox_partitions_ensure


@pytest.fixture
def api_client_token(db):
    """An API client and its clear token."""
    client, token = api_client_create(
        name="ci", token="test-token-ci-0123456789abcdef", actor=Actor.system()
    )
    return client, token


@pytest.fixture
def api(api_client_token):
    """A DRF test client authenticated as the ``ci`` API client."""
    _, token = api_client_token
    return bearer_http(token)


@pytest.fixture
def other_api(db):
    """A second API client, to prove that keys and resources are scoped per client."""
    _, token = api_client_create(
        name="other", token="test-token-other-0123456789abcd", actor=Actor.system()
    )
    return bearer_http(token)


@pytest.fixture
def source(db):
    """The research source (``research-sync``) with its test secret."""
    return research_source()


@pytest.fixture
def github_source(db):
    """The GitHub source (``github``) with its test secret."""
    return github_source_create()


@pytest.fixture(autouse=True)
def _processes_only_in_slow_tests(request, monkeypatch):
    """``make test-fast`` leaves out the tests marked slow: the ones that start processes
    (workers, servers, a browser, ``manage.py``, the chaos run). A test that starts one without
    the mark fails here instead of slowing down every run of the fast suite."""
    if request.node.get_closest_marker("slow"):
        return

    def refuse(self, args, *more, **options):
        raise AssertionError(
            f"{request.node.nodeid} starts a process ({args!r}): mark it slow"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture(params=["redis", "rabbitmq"])
def broker_url(request) -> str:
    """Each broker the product runs on in turn (Redis, RabbitMQ), empty at the start and
    emptied at the end (on RabbitMQ, a virtual host of the test's own): for the tests whose
    behaviour depends on the broker."""
    from tests.broker import broker_for_test

    with broker_for_test(request.param) as url:
        yield url


@pytest.fixture(scope="session", autouse=True)
def _tables_emptied_by_delete():
    """A test with ``transaction=True`` ends with Django's flush: every table emptied, then
    ``post_migrate`` to create the content types and permissions again. Two things make that
    cheaper here, with the same tables at the start of the next test:

    - On PostgreSQL Django empties the tables with one ``TRUNCATE`` of all of them, which gives
      each table and index a new file (about 0.4 s here, for the few rows a test leaves);
      ``DELETE`` of each table, all sent in one round trip, does the same work in a few ms.
      Foreign keys are checked at commit (Django creates them deferrable, and the flush runs
      in one transaction), so the order does not matter. A flush that resets sequences keeps
      Django's own statement.
    - The content types and permissions are kept, and ``post_migrate`` is not sent, when they
      hold exactly the rows the last ``post_migrate`` left and its only receivers are
      contenttypes' and auth's (which fill these two tables and nothing else). A test that
      changed them (a migration test, a deleted permission) gets the full flush instead:
      emptied and created again. The first flush of a run is always the full one."""
    from django.contrib.auth.management import create_permissions
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.management import create_contenttypes
    from django.contrib.contenttypes.models import ContentType
    from django.core.management.commands import flush
    from django.db import connections
    from django.db.backends.postgresql.operations import DatabaseOperations
    from django.db.models.signals import post_migrate

    truncate = DatabaseOperations.sql_flush
    post_migrate_emit = flush.emit_post_migrate_signal
    kept_tables = {ContentType._meta.db_table, Permission._meta.db_table}
    # Per database alias: the rows of the kept tables as the last post_migrate left them,
    # and whether the flush under way keeps them.
    as_created: dict[str, tuple[str, str]] = {}
    keeping: dict[str, bool] = {}

    def kept_rows(alias: str) -> tuple[str, str]:
        """A digest of each kept table's rows, every column, computed by the server: one
        round trip, and none of the thousand rows brought over."""
        connection = connections[alias]
        quote = connection.ops.quote_name
        digests = [
            f"(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t.id), ''))"  # noqa: S608
            f" FROM {quote(model._meta.db_table)} t)"
            for model in (ContentType, Permission)
        ]
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(digests)}")
            content_types, permissions = cursor.fetchone()
        return content_types, permissions

    def post_migrate_fills_only_them() -> bool:
        receivers = {
            entry[1]() if isinstance(entry[1], weakref.ReferenceType) else entry[1]
            for entry in post_migrate.receivers
        }
        return receivers == {create_contenttypes, create_permissions}

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        alias = self.connection.alias
        keeping[alias] = False
        if reset_sequences or allow_cascade:
            return truncate(
                self,
                style,
                tables,
                reset_sequences=reset_sequences,
                allow_cascade=allow_cascade,
            )
        if (
            alias in as_created
            and post_migrate_fills_only_them()
            and kept_rows(alias) == as_created[alias]
        ):
            keeping[alias] = True
            tables = [t for t in tables if t not in kept_tables]
        # One statement list, sent in one round trip (psycopg runs several statements
        # given without parameters in one call, and never prepares them).
        return [
            "\n".join(
                ["SET CONSTRAINTS ALL DEFERRED;"]
                + [
                    f"{style.SQL_KEYWORD('DELETE FROM')} "
                    f"{style.SQL_FIELD(self.quote_name(t))};"
                    for t in tables
                ]
            )
        ]

    def emit_post_migrate_signal(verbosity, interactive, db, **kwargs):
        if keeping.pop(db, False):
            return  # what it would create is there
        post_migrate_emit(verbosity, interactive, db, **kwargs)
        as_created[db] = kept_rows(db)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        patch.setattr(flush, "emit_post_migrate_signal", emit_post_migrate_signal)
        yield


@pytest.fixture(scope="session", autouse=True)
def _connections_kept_after_a_transactional_test():
    """Django closes every connection after a test with ``transaction=True``, and the next
    test opens a new one: a new server process, whose first statement on each table reads
    the catalogs again (about 15 ms a test here, the flush's first statements included).
    Here a PostgreSQL connection is kept instead when it was opened with the database
    settings of the run (a test that changed its port or options gets a new one), and given
    back as a new one would be: ``DISCARD ALL`` drops what the session holds (its settings,
    advisory locks, temporary tables, prepared statements, which psycopg forgets too), and
    Django sets the time zone on it again. A connection left in a transaction, or in any
    state Django would not open one in, is closed as before."""
    import copy

    from django.db import DatabaseError, connections
    from django.db.backends.signals import connection_created
    from django.test import TransactionTestCase

    def settings_of(connection) -> dict:
        return {k: v for k, v in connection.settings_dict.items() if k != "NAME"}

    # The settings of the run (the test database's name is set later), and those each
    # connection was opened with.
    configured = {
        alias: copy.deepcopy(settings_of(connections[alias])) for alias in connections
    }
    opened_with: dict[str, dict] = {}

    def remember(sender, connection, **kwargs):
        opened_with[connection.alias] = copy.deepcopy(connection.settings_dict)

    def as_new(connection) -> None:
        if connection.connection is None:
            return
        kept = (
            connection.vendor == "postgresql"
            and opened_with.get(connection.alias) == connection.settings_dict
            and settings_of(connection) == configured.get(connection.alias)
            and connection.get_autocommit()
            and not connection.in_atomic_block
            and not connection.needs_rollback
            and not connection.errors_occurred
            and connection.connection.info.transaction_status == 0  # idle
        )
        if kept:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("DISCARD ALL")
                # psycopg forgets its prepared statements when it sees the command run,
                # but only the first time a connection runs it: it is told each time.
                connection.connection._prepared.clear()
                connection.init_connection_state()
                connection.run_on_commit = []
                return
            except DatabaseError:
                pass
        connection.close()

    def should_reload_connections(self) -> bool:
        for connection in connections.all(initialized_only=True):
            as_new(connection)
        return False  # each is closed or as new already

    connection_created.connect(remember)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            TransactionTestCase, "_should_reload_connections", should_reload_connections
        )
        yield
    connection_created.disconnect(remember)


# --- the console's users ------------------------------------------------------------------


@pytest.fixture
def roles(db):
    """The console's roles (``roles_bootstrap``): made by the first test of a process, copied
    back for the others (tests/snapshots.py) while the permissions are the rows they were
    made over (a flush that created them again gives them new ids: the roles are made again)."""
    from django.contrib.auth.models import Permission
    from django.db.models import Count, Max

    from tests.snapshots import rows_snapshot

    permissions = Permission.objects.aggregate(count=Count("id"), last=Max("id"))
    rows_snapshot(
        f"the console's roles over the permissions {permissions}", roles_bootstrap
    )


@pytest.fixture
def operator(roles):
    return make_user("operator", OPERATORS)


@pytest.fixture
def auditor(roles):
    return make_user("auditor", AUDITORS)


@pytest.fixture
def operator_client(operator):
    """A test client logged in as the operator: a client of its own, so that a test that
    also takes ``auditor_client`` (or ``client``) acts as each in turn."""
    from django.test import Client

    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def auditor_client(auditor):
    """A test client logged in as the auditor, a client of its own (see ``operator_client``)."""
    from django.test import Client

    client = Client()
    client.force_login(auditor)
    return client


@pytest.fixture
def error_records():
    """What ``django.request`` logs for a 500: the records an error report (a mail, a log
    line) is built from."""
    import logging

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.ERROR)
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


@pytest.fixture
def running():
    """Starts processes (``tests.processes.Process``) and kills every one of them at the end,
    whatever happens. With ``empty_broker`` before it, the broker is emptied after they are
    gone."""
    from tests.processes import Process

    started: list[Process] = []

    def start(process: Process) -> Process:
        started.append(process.start())
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture
def workers(empty_broker, running, tmp_path):
    """Real Celery workers for the test (``tests.processes.Workers``): the broker emptied
    before they start and after they are killed, each killed at the end whatever happens."""
    from tests.processes import Workers

    return Workers(tmp_path, running)


@pytest.fixture
def empty_broker():
    """The test broker emptied before and after the test, unacked messages of killed workers
    included."""
    from tests.broker import broker_reset

    broker_reset()
    yield
    broker_reset()


def migrations_digest() -> str | None:
    """A digest of the migration files of every installed app (Django's and the libraries'
    too) with Django's version: the schema a test database migrated by them has. None when an
    app has models without migrations (its tables would come from the models, unread here)."""
    from django.apps import apps
    from django.db.migrations.loader import MigrationLoader

    digest = hashlib.sha256(django.get_version().encode())
    for config in sorted(apps.get_app_configs(), key=lambda config: config.label):
        module, _ = MigrationLoader.migrations_module(config.label)
        spec = importlib.util.find_spec(module) if module else None
        if spec is None or not spec.submodule_search_locations:
            if any(config.get_models()):
                return None
            continue
        for folder in spec.submodule_search_locations:
            for path in sorted(Path(folder).glob("*.py")):
                digest.update(f"\0{config.label}/{path.name}\0".encode())
                digest.update(path.read_bytes())
    return f"migrations {digest.hexdigest()}"


def reused_database_mark(connection) -> str | None:
    """The mark a run left on the test database (its comment), None if none or no database."""
    with connection._nodb_cursor() as cursor:
        cursor.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database"
            " WHERE datname = %s",
            [connection.creation._get_test_db_name()],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def reused_database_mark_set(connection, mark: str | None) -> None:
    """Sets the mark (letters, digits and spaces: a utility statement takes no parameters)."""
    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    literal = f"'{mark}'" if mark else "NULL"
    with connection.cursor() as cursor:
        cursor.execute(f"COMMENT ON DATABASE {name} IS {literal}")


def database_commits_unflushed(connection) -> None:
    """``synchronous_commit`` off on the test database, for every connection to it (this
    one, the tests' threads' and the processes they start): a commit returns before its
    write-ahead log is flushed to the disk, a wait of about 0.2 ms a commit here that the
    transactional tests pay thousands of times. What other connections see, and when, is the
    same; only a crash of the server could lose the last commits, and a test database's
    rows matter to no later run. The product's own statements, and the settings it runs
    with elsewhere, are left as they are."""
    if connection.vendor != "postgresql":
        return
    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER DATABASE {name} SET synchronous_commit = off")
        cursor.execute("SET synchronous_commit = off")


@pytest.fixture(scope="session")
def django_db_createdb(
    django_db_createdb,
    django_db_keepdb,
    django_db_use_migrations,
    django_db_modify_db_settings,
    django_db_blocker,
) -> bool:
    """With ``--reuse-db`` (``make test-fast``), a test database is reused only if the run
    that left it ended, by itself or on Ctrl-C (its mark is set at the end of a run and cleared
    at the start: a run killed on the way leaves none), and was migrated by the migration files
    there are now (the mark holds their digest). Otherwise it is created again: ``migrate``
    applies only the migrations not yet recorded, so one edited, renamed or removed since would
    stay as it was applied, and a killed run may have left anything (a migration test's old
    layout). A database made without migrations (``--nomigrations``) is never reused."""
    if django_db_createdb or not django_db_keepdb:
        return django_db_createdb
    if not django_db_use_migrations:
        return True
    from django.db import connection

    digest = migrations_digest()
    with django_db_blocker.unblock():
        return digest is None or reused_database_mark(connection) != digest


@pytest.fixture(scope="session")
def django_db_setup(
    django_db_setup,
    django_db_keepdb,
    django_db_createdb,
    django_db_use_migrations,
    django_db_blocker,
):
    """A reused test database (``--reuse-db``) starts emptied as a new one, by ``TRUNCATE``:
    rows a stopped test left go, and so does every row version earlier runs deleted or rolled
    back, which ``DELETE`` would leave (the server may run without autovacuum: here the inbox
    table of a reused database had grown to 512 MB of dead rows, and every scan of it with
    it). It loses its mark until the run ends (``django_db_createdb`` above).

    Every test database, reused or new, commits without waiting for the write-ahead log to
    reach the disk (``database_commits_unflushed``)."""
    from django.db import connection

    with django_db_blocker.unblock():
        database_commits_unflushed(connection)
        # Today's partitions and the next days', as the periodic work keeps them: a reused
        # database may have been migrated days ago.
        inbox_partitions_ensure()
    if not django_db_keepdb:
        yield
        return
    from django.core.management import call_command

    with django_db_blocker.unblock():
        reused_database_mark_set(connection, None)
        if not django_db_createdb:
            call_command("flush", verbosity=0, interactive=False, reset_sequences=True)
    yield
    if django_db_use_migrations:
        with django_db_blocker.unblock():
            reused_database_mark_set(connection, migrations_digest())


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``--dist loadgroup``), the chaos runs share something outside their
    process: each starts a whole stack, and the cluster's network namespaces are cleaned up by
    name. They run in one worker, one after another. (The RabbitMQ tests need no such group:
    each has a virtual host of its own, ``tests.broker.broker_for_test``.)"""
    for item in items:
        if item.nodeid.startswith("tests/test_chaos"):
            item.add_marker(pytest.mark.xdist_group("chaos"))
