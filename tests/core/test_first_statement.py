"""A request's first statement as the connection's health check (``core.db``): on a
connection kept from an earlier request whose database end has gone (a restart), the
statement runs once more on a new connection instead of failing the request; a statement
that the database itself refused is not run again."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import OperationalError, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from core.db import fetchone_checking_connection
from deployments.models import Deployment
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import deployment_body
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import RESEARCH_SOURCE, research_source, signed_post
from webhooks.models import InboxEvent

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="a PostgreSQL backend to end"
    ),
]


def post_deployment(http, body: bytes, key: str):
    return http.post(
        "/api/deployments/",
        data=body,
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


def _later_request_with_its_backend_gone() -> int:
    """The state of a connection at the start of a later request (Django resets the
    health check flag when a request ends), after its server process was ended."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    params = connection.get_connection_params()
    with psycopg.connect(
        host=params.get("host"),
        port=params.get("port"),
        user=params.get("user"),
        dbname=params["dbname"],
        autocommit=True,
    ) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    connection.health_check_done = False
    return pid


@pytest.fixture
def health_checks():
    """``CONN_HEALTH_CHECKS`` on, as in production, for the connection and the ones it
    opens again."""
    configured = connection.settings_dict["CONN_HEALTH_CHECKS"]
    enabled = connection.health_check_enabled
    connection.settings_dict["CONN_HEALTH_CHECKS"] = True
    connection.health_check_enabled = True
    yield
    connection.settings_dict["CONN_HEALTH_CHECKS"] = configured
    connection.health_check_enabled = enabled


def test_a_statement_on_a_dead_connection_runs_again_on_a_new_one(health_checks):
    pid = _later_request_with_its_backend_gone()
    assert fetchone_checking_connection("SELECT pg_backend_pid()", []) != (pid,)
    assert connection.health_check_done


def test_a_statement_the_database_refused_is_not_run_again(health_checks):
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE first_runs (n int)")
    connection.health_check_done = False
    sql = (
        "WITH ins AS (INSERT INTO first_runs VALUES (1) RETURNING n)"
        " SELECT pg_sleep(1) FROM ins"
    )
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = 50")
    try:
        with pytest.raises(OperationalError):
            fetchone_checking_connection(sql, [])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 0")
    # The same connection (its temporary table is there), and the statement ran once.
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM first_runs")
        assert cursor.fetchone() == (0,)


def test_a_delivery_on_a_dead_connection_is_accepted_once(health_checks, settings):
    # The source as a web process keeps it: the delivery's one statement is its first.
    settings.WEBHOOK_SOURCE_CACHE_SECONDS = 60
    research_source()
    http = Client()
    assert signed_post(http, RESEARCH_SOURCE, research_event()).status_code == 202
    _later_request_with_its_backend_gone()
    body = research_event()
    with CaptureQueriesContext(connection) as queries:
        response = signed_post(http, RESEARCH_SOURCE, body)
    assert response.status_code == 202, response.content
    table = InboxEvent._meta.db_table
    sql = [q["sql"] for q in queries.captured_queries]
    # Only the statement that records a delivery (its key and, with it, the row).
    assert sql and all(f'INSERT INTO "{table}"' in q for q in sql), sql
    event = InboxEvent.objects.get(event_id=body["event_id"])
    assert event.delivery_count == 1


def test_a_new_idempotency_key_on_a_dead_connection_is_created_once(
    health_checks, settings
):
    """The check for a byte-identical retry is the request's first statement (the token's
    client kept by the web process): on a connection whose backend is gone it runs again on
    a new one, and the operation is created once."""
    settings.API_CLIENT_CACHE_SECONDS = 60
    _, token = api_client_make(token="first-statement-token-0123456789ab")
    http = bearer_http(token)
    body = json.dumps(deployment_body()).encode()
    assert post_deployment(http, body, "first-1").status_code == 202
    gone = _later_request_with_its_backend_gone()
    with CaptureQueriesContext(connection) as queries:
        response = post_deployment(http, body, "first-2")
    assert response.status_code == 202, response.content
    sql = [q["sql"] for q in queries.captured_queries]
    assert [q.split(" ", 3)[:3] for q in sql] == [
        ["WITH", "commit_mode", "AS"],
        ["WITH", "record", "AS"],
    ], sql
    assert connection.connection.info.backend_pid != gone
    assert Deployment.objects.filter(idempotency_key="first-2").count() == 1
