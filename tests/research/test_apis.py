"""Research read APIs (docs/http-api.md), with documents built by the real processing path."""

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from research.models import DocumentRevision, ResearchDocument
from tests.integrations.research.factories import research_event
from tests.research.factories import document_event_apply

pytestmark = pytest.mark.django_db

DOCUMENT_FIELDS = {
    "entity_id",
    "current_source_version",
    "source_url",
    "source_content_hash",
    "title",
    "summary",
    "authors",
    "citations",
    "published_at",
    "is_deleted",
    "last_event_id",
    "updated_at",
}


def apply(**kwargs) -> dict:
    body = research_event(**kwargs)
    document_event_apply(body)
    return body


def test_document_detail_has_exactly_the_spec_fields(api):
    envelope = apply(entity_id="doc_api", source_version=4)
    response = api.get("/api/research/documents/doc_api/")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == DOCUMENT_FIELDS
    assert body["entity_id"] == "doc_api"
    assert body["current_source_version"] == 4
    assert body["source_url"] == envelope["source"]["url"]
    assert body["source_content_hash"] == envelope["source"]["content_hash"]
    assert body["title"] == envelope["source"]["title"]
    assert body["summary"] == envelope["data"]["summary"]
    assert body["authors"] == ["A", "B"]
    assert body["citations"] == envelope["data"]["citations"]
    assert body["published_at"] == "2026-08-24T21:00:00Z"
    assert body["is_deleted"] is False
    assert body["last_event_id"] == envelope["event_id"]


def test_tombstone_answers_200_with_is_deleted(api):
    apply(entity_id="doc_gone", source_version=1)
    deleted = apply(
        entity_id="doc_gone", source_version=2, event_type="research.document.deleted"
    )
    body = api.get("/api/research/documents/doc_gone/").json()
    assert body["is_deleted"] is True
    assert body["current_source_version"] == 2
    assert body["last_event_id"] == deleted["event_id"]
    assert body["citations"] == []


def test_unknown_document_is_404_not_found(api):
    for url in (
        "/api/research/documents/doc_nope/",
        "/api/research/documents/doc_nope/revisions/",
    ):
        response = api.get(url)
        assert response.status_code == 404
        assert response.json() == {"error": "not_found"}


def test_revisions_are_a_page_oldest_first_with_the_spec_fields(api):
    first = apply(entity_id="doc_rev", source_version=1)
    apply(entity_id="doc_rev", source_version=1)  # duplicate version: no revision
    third = apply(
        entity_id="doc_rev", source_version=5, event_type="research.document.deleted"
    )
    second = apply(entity_id="doc_rev", source_version=3)  # late: out of order
    body = api.get("/api/research/documents/doc_rev/revisions/").json()
    assert set(body) == {"next", "previous", "results"}
    assert [set(r) for r in body["results"]] == [
        {"source_version", "event_id", "content_hash", "applied_at"}
    ] * 2
    assert [(r["source_version"], r["event_id"]) for r in body["results"]] == [
        (1, first["event_id"]),
        (5, third["event_id"]),
    ]
    assert body["results"][0]["content_hash"] == first["source"]["content_hash"]
    assert second["event_id"] not in {r["event_id"] for r in body["results"]}


def test_document_list_pages_with_a_cursor_and_filters(api):
    for i in range(5):
        apply(entity_id=f"doc_l{i}", source_version=1)
    apply(entity_id="doc_l0", source_version=2, event_type="research.document.deleted")

    page = api.get("/api/research/documents/?page_size=2").json()
    assert set(page) == {"next", "previous", "results"}
    seen = [d["entity_id"] for d in page["results"]]
    while page["next"]:
        page = api.get(page["next"]).json()
        seen += [d["entity_id"] for d in page["results"]]
    assert sorted(seen) == [f"doc_l{i}" for i in range(5)]
    assert set(page["results"][0]) == DOCUMENT_FIELDS

    deleted = api.get("/api/research/documents/?is_deleted=true").json()["results"]
    assert [d["entity_id"] for d in deleted] == ["doc_l0"]
    alive = api.get("/api/research/documents/?is_deleted=false").json()["results"]
    assert len(alive) == 4

    updated_at = api.get("/api/research/documents/doc_l0/").json()["updated_at"]
    since = api.get("/api/research/documents/", {"updated_since": updated_at}).json()[
        "results"
    ]
    assert [d["entity_id"] for d in since] == ["doc_l0"]


@pytest.mark.parametrize(
    "query", ["updated_since=yesterday", "is_deleted=maybe", "updated_since=2026-13-01"]
)
def test_bad_filters_are_422_invalid_payload(api, query):
    response = api.get(f"/api/research/documents/?{query}")
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_payload"


@pytest.mark.parametrize(
    "url",
    [
        "/api/research/documents/",
        "/api/research/documents/doc_x/",
        "/api/research/documents/doc_x/revisions/",
    ],
)
def test_research_apis_need_the_bearer_token(url):
    response = APIClient().get(url)
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}


def test_admin_lists_are_read_only_and_render(client):
    apply(entity_id="doc_adm", source_version=1)
    admin = get_user_model().objects.create_superuser("root", "r@example.org", "pw")
    client.force_login(admin)
    for url in (
        "/admin/research/researchdocument/",
        "/admin/research/researchdocument/?q=doc_adm&is_deleted__exact=0",
        "/admin/research/documentrevision/",
        "/admin/research/documentrevision/?q=doc_adm&kind__exact=updated",
    ):
        response = client.get(url)
        assert response.status_code == 200, url
        assert b"doc_adm" in response.content
    assert client.get("/admin/research/researchdocument/add/").status_code == 403
    doc = ResearchDocument.objects.get(entity_id="doc_adm")
    change = client.get(f"/admin/research/researchdocument/{doc.pk}/change/")
    assert change.status_code == 200
    assert b'name="_save"' not in change.content
    revision = DocumentRevision.objects.get(document=doc)
    delete = client.post(f"/admin/research/documentrevision/{revision.pk}/delete/")
    assert delete.status_code == 403
    assert DocumentRevision.objects.filter(pk=revision.pk).exists()


@pytest.mark.parametrize("value", ["1", "0", "yes", "True", "null", ""])
def test_is_deleted_is_true_or_false_and_nothing_else(api, value):
    response = api.get("/api/research/documents/", {"is_deleted": value})
    assert response.status_code == 422
    assert "is_deleted" in response.json()["details"]


@pytest.mark.parametrize(
    ("since", "listed"),
    [
        # Valid RFC 3339 instants whose UTC reading falls outside Python's years 1-9999.
        ("9999-12-31T23:00:00-02:00", False),
        ("0001-01-01T00:00:00+01:00", True),
        ("9999-12-31T23:59:59Z", False),
        ("0001-01-01T00:00:00Z", True),
    ],
)
def test_updated_since_at_the_edges_of_time_is_a_bound_not_an_error(api, since, listed):
    apply(entity_id="doc_edge", source_version=1)
    response = api.get("/api/research/documents/", {"updated_since": since})
    assert response.status_code == 200, response.content
    ids = [d["entity_id"] for d in response.json()["results"]]
    assert ids == (["doc_edge"] if listed else [])


def test_an_empty_filter_is_not_a_filter_left_out(api):
    response = api.get("/api/research/documents/?updated_since=")
    assert response.status_code == 422
    assert "updated_since" in response.json()["details"]
