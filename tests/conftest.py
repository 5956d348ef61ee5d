import subprocess

import pytest

from audit.roles import AUDITORS, OPERATORS, roles_bootstrap
from core.actors import Actor
from core.services import api_client_create
from tests.console import make_user
from tests.core.factories import bearer_http
from tests.integrations.github.factories import github_source_create
from tests.webhooks.factories import research_source


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
    """Each broker the product runs on in turn (Redis, RabbitMQ), emptied before and after
    the test: for the tests whose behaviour depends on the broker."""
    from tests.broker import broker_purge, broker_urls

    url = broker_urls()[request.param]
    broker_purge(url)
    yield url
    broker_purge(url)


@pytest.fixture(scope="session", autouse=True)
def _tables_emptied_by_delete():
    """A test with ``transaction=True`` ends with Django's flush: every table emptied. On
    PostgreSQL Django does it with one ``TRUNCATE`` of all tables, which gives each table and
    index a new file (about 0.4 s here, for the few rows a test leaves); ``DELETE`` of each table
    does the same work in about 10 ms. Foreign keys are checked at commit (Django creates them
    deferrable, and the flush runs in one transaction), so the order does not matter. A flush
    that resets sequences keeps Django's own statement."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return truncate(
                self,
                style,
                tables,
                reset_sequences=reset_sequences,
                allow_cascade=allow_cascade,
            )
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(t))};"
            for t in tables
        ]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield


# --- the console's users ------------------------------------------------------------------


@pytest.fixture
def roles(db):
    roles_bootstrap()


@pytest.fixture
def operator(roles):
    return make_user("operator", OPERATORS)


@pytest.fixture
def auditor(roles):
    return make_user("auditor", AUDITORS)


@pytest.fixture
def operator_client(client, operator):
    client.force_login(operator)
    return client


@pytest.fixture
def auditor_client(client, auditor):
    client.force_login(auditor)
    return client


@pytest.fixture
def empty_broker():
    """The test broker emptied before and after the test, unacked messages of killed workers
    included."""
    from tests.broker import broker_reset

    broker_reset()
    yield
    broker_reset()
