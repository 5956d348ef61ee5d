"""Cursor pages (docs/http-api.md, "Read APIs"): a cursor the server did not issue is 404
``not_found``, whatever it holds."""

from base64 import b64encode
from urllib.parse import quote

import pytest

from core.actors import Actor
from tests.core.factories import bearer_http
from tests.deployments.factories import build_body, deployment_body
from tests.deployments.factories import idempotent_post as post
from tests.integrations.research.factories import research_event
from tests.research.factories import document_event_apply
from tests.snapshots import rows_snapshot
from trail.api_clients import api_client_create

pytestmark = pytest.mark.django_db

LISTS = [
    "/api/deployments/",
    "/api/builds/",
    "/api/research/documents/",
    "/api/research/documents/doc_c/revisions/",
]


def cursor(querystring: str) -> str:
    return quote(b64encode(querystring.encode()).decode())


CLIENT_TOKEN = "test-token-ci-0123456789abcdef"


@pytest.fixture
def api(db):
    """The ``ci`` API client, as the suite's ``api``, with a row on every list, so that a
    cursor's position is compared with real ids: made through the API by the first test of
    a process and copied back for the others (tests/snapshots.py): every test here starts
    from the same rows."""

    def build() -> None:
        api_client_create(name="ci", token=CLIENT_TOKEN, actor=Actor.system())
        http = bearer_http(CLIENT_TOKEN)
        assert post(http, "/api/deployments/", deployment_body()).status_code == 202
        assert post(http, "/api/builds/", build_body()).status_code == 202
        document_event_apply(research_event(entity_id="doc_c", source_version=1))

    rows_snapshot("the pagination tests' rows", build)
    return bearer_http(CLIENT_TOKEN)


@pytest.fixture
def rows(api):
    """The rows ``api`` starts with (named for the tests that rely on them)."""


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    "querystring",
    [
        "p=abc",  # the forged cursor of the report: cD1hYmM=
        "p=",
        "p=1.5",
        "p=0x10",
        "p=99999999999999999999999",  # beyond a bigint
        "p=-99999999999999999999999",
        "r=1&p=abc",
        "o=1&p=abc",
        "p=\u0661",  # an Arabic-Indic digit: int() would take it, the column would not
    ],
)
def test_a_forged_cursor_position_is_404_not_found(api, rows, url, querystring):
    response = api.get(f"{url}?cursor={cursor(querystring)}")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": "not_found"}


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    "raw", ["%%%", "bm90IGEgcXVlcnk=", cursor("o=x"), cursor("r=2")]
)
def test_a_cursor_that_does_not_decode_is_404_not_found(api, rows, url, raw):
    response = api.get(f"{url}?cursor={raw}")
    assert response.status_code == 404
    assert response.json() == {"error": "not_found"}


@pytest.mark.parametrize("url", LISTS)
def test_an_issued_cursor_still_pages(api, rows, url):
    # A second row on each list, and pages of one: the first page's next link is a real cursor.
    post(api, "/api/deployments/", deployment_body(), key="key-2")
    post(api, "/api/builds/", build_body(), key="key-2")
    document_event_apply(research_event(entity_id="doc_d", source_version=1))
    document_event_apply(research_event(entity_id="doc_c", source_version=2))
    first = api.get(f"{url}?page_size=1").json()
    assert first["next"]
    second = api.get(first["next"])
    assert second.status_code == 200
    assert len(second.json()["results"]) == 1
    assert second.json()["results"] != first["results"]
    back = api.get(second.json()["previous"])  # a reversed cursor
    assert back.status_code == 200
    assert back.json()["results"] == first["results"]


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize(
    "value", ["abc", "0", "000", "-1", "+5", "1.5", "", "null", "5 ", "\u0665"]
)
def test_a_page_size_that_is_not_a_whole_number_of_at_least_1_is_422(
    api, rows, url, value
):
    """DRF read what it could not parse as the default page (``page_size=abc``), which no
    schema can state: a client sees its mistake instead."""
    response = api.get(url, {"page_size": value})
    assert response.status_code == 422, (value, response.content)
    assert response.json() == {
        "error": "invalid_payload",
        "details": {"page_size": ["A whole number of at least 1."]},
    }


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize("value", ["1", "01", "500", "501", "1" + "0" * 30])
def test_a_page_size_of_at_least_1_is_read_up_to_the_maximum(api, rows, url, value):
    response = api.get(url, {"page_size": value})
    assert response.status_code == 200, (value, response.content)
    assert len(response.json()["results"]) == 1
