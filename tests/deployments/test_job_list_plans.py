"""The job lists (``GET /api/deployments/``, ``GET /api/builds/``) read only the client's own
rows: EXPLAIN ANALYZE on PostgreSQL, over a table where another client's rows are the newest."""

import json

import pytest
from django.db import connection

from core.pagination import CursorPage
from deployments.models import Build, Deployment
from deployments.selectors import job_list_by_key
from tests.core.factories import api_client_make
from tests.deployments.factories import BuildFactory, DeploymentFactory

pytestmark = pytest.mark.django_db

PAGE = CursorPage.page_size + 1  # the paginator reads one row more than a page


def _rows_copy(model, template, *, client, count: int) -> None:
    """``count`` copies of ``template`` for ``client``, in one statement."""
    table = model._meta.db_table
    columns = [
        f.column
        for f in model._meta.concrete_fields
        if f.column not in ("id", "public_id", "client_id")
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (public_id, client_id, {', '.join(columns)})"  # noqa: S608
            f" SELECT 'x_' || %s || '_' || g, %s, {', '.join(columns)} FROM {table},"
            " generate_series(1, %s) AS g WHERE id = %s",
            [client.pk, client.pk, count, template.pk],
        )


def _scans(plan: dict) -> list[dict]:
    found = []

    def walk(node):
        if "Relation Name" in node:
            found.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    return found


@pytest.mark.slow  # tens of thousands of rows: make test only (docs/development.md)
@pytest.mark.parametrize(
    ("model", "factory"), [(Deployment, DeploymentFactory), (Build, BuildFactory)]
)
def test_a_clients_page_reads_its_own_rows_only(model, factory):
    ours, _ = api_client_make()
    theirs, _ = api_client_make()
    # Ours first (older), then many more of another client's: walking the table backwards
    # by id meets all of theirs before the first of ours. Ours are a small share of the
    # table (about 8%), as a client's are beside a busy one's: PostgreSQL costs a walk by id
    # as if each client's rows were spread evenly, so at a share near a quarter the two
    # plans cost the same and either may be taken.
    _rows_copy(model, factory(client=ours), client=ours, count=5_000)
    _rows_copy(model, factory(client=theirs), client=theirs, count=60_000)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {model._meta.db_table}")
    jobs = job_list_by_key(model=model, client=ours, idempotency_key=None)
    middle = jobs.order_by("-id").values_list("id", flat=True)[2_500]

    # The first page, and a page further on (a cursor's position: id below it).
    for page in (jobs, jobs.filter(id__lt=middle)):
        explained = page.order_by("-id")[:PAGE].explain(analyze=True, format="json")
        plan = json.loads(explained)[0]["Plan"]
        (scan,) = _scans(plan)
        assert scan.get("Rows Removed by Filter", 0) == 0, explained
        assert scan["Actual Rows"] == PAGE, explained
        assert "Sort" not in explained, explained  # the index gives the order
