"""The research handler through the processing service: ordering, tombstones, validation."""

from datetime import timedelta

import pytest

from research.models import DocumentRevision, ResearchDocument
from tests.integrations.research.factories import BASE_TIME, research_event
from tests.research.factories import document_event_apply
from webhooks.models import InboxAttempt

pytestmark = pytest.mark.django_db


def test_created_event_upserts_the_document_with_its_citations_and_a_revision():
    envelope = research_event(
        entity_id="doc_1", event_type="research.document.created", source_version=3
    )
    event = document_event_apply(envelope)

    assert event.processing_status == "processed"
    assert event.processed_at is not None
    assert event.attempts == 1
    doc = ResearchDocument.objects.get(entity_id="doc_1")
    assert doc.current_source_version == 3
    assert doc.last_event_id == envelope["event_id"]
    assert doc.source_url == envelope["source"]["url"]
    assert doc.title == envelope["source"]["title"]
    assert doc.source_content_hash == envelope["source"]["content_hash"]
    assert doc.summary == envelope["data"]["summary"]
    assert doc.authors == ["A", "B"]
    assert [(c.text, c.reference_url) for c in doc.citations.all()] == [
        (c["text"], c["reference_url"]) for c in envelope["data"]["citations"]
    ]
    assert doc.published_at.isoformat() == "2026-08-24T21:00:00+00:00"
    (revision,) = DocumentRevision.objects.filter(document=doc)
    assert revision.inbox_event_id == event.pk
    assert revision.source_version == 3
    assert revision.content_hash == envelope["source"]["content_hash"]
    assert revision.snapshot["summary"] == envelope["data"]["summary"]
    (attempt,) = InboxAttempt.objects.filter(event=event)
    assert (attempt.outcome, attempt.resulting_status, attempt.worker) == (
        "succeeded",
        "processed",
        "test",
    )
    assert attempt.finished_at is not None


def test_equal_version_is_ignored_as_duplicate_version_and_changes_nothing():
    document_event_apply(research_event(entity_id="doc_eq", source_version=5))
    second = document_event_apply(
        research_event(entity_id="doc_eq", source_version=5, data={"summary": "x"})
    )
    assert second.processing_status == "ignored_duplicate_version"
    assert "not newer" in second.error_message
    doc = ResearchDocument.objects.get(entity_id="doc_eq")
    assert doc.summary != "x"
    assert doc.revisions.count() == 1
    assert InboxAttempt.objects.get(event=second).outcome == "ignored"


def test_lower_version_is_ignored_out_of_order():
    document_event_apply(research_event(entity_id="doc_ooo", source_version=8))
    late = document_event_apply(research_event(entity_id="doc_ooo", source_version=7))
    assert late.processing_status == "ignored_out_of_order"
    assert ResearchDocument.objects.get(entity_id="doc_ooo").current_source_version == 8


def test_delete_then_late_older_update_never_resurrects():
    document_event_apply(research_event(entity_id="doc_d", source_version=1))
    deleted = document_event_apply(
        research_event(
            entity_id="doc_d", event_type="research.document.deleted", source_version=3
        )
    )
    late = document_event_apply(research_event(entity_id="doc_d", source_version=2))

    assert deleted.processing_status == "processed"
    assert late.processing_status == "ignored_out_of_order"
    doc = ResearchDocument.objects.get(entity_id="doc_d")
    assert doc.is_deleted is True
    assert doc.current_source_version == 3
    assert doc.summary == ""
    assert not doc.citations.exists()
    kinds = list(doc.revisions.order_by("id").values_list("kind", "source_version"))
    assert kinds == [("updated", 1), ("deleted", 3)]


def test_newer_update_after_delete_resurrects():
    document_event_apply(
        research_event(
            entity_id="doc_r", event_type="research.document.deleted", source_version=4
        )
    )
    newer = document_event_apply(
        research_event(
            entity_id="doc_r", event_type="research.document.created", source_version=5
        )
    )
    assert newer.processing_status == "processed"
    doc = ResearchDocument.objects.get(entity_id="doc_r")
    assert (doc.is_deleted, doc.current_source_version) == (False, 5)
    assert doc.summary


def test_delete_of_a_never_seen_document_leaves_a_tombstone_that_blocks_older_creates():
    document_event_apply(
        research_event(
            entity_id="doc_t", event_type="research.document.deleted", source_version=9
        )
    )
    create = document_event_apply(
        research_event(
            entity_id="doc_t", event_type="research.document.created", source_version=2
        )
    )
    doc = ResearchDocument.objects.get(entity_id="doc_t")
    assert doc.is_deleted is True
    assert doc.current_source_version == 9
    assert create.processing_status == "ignored_out_of_order"
    assert doc.revisions.get().kind == "deleted"


def test_without_versions_occurred_at_then_event_id_decides():
    t = BASE_TIME
    first = document_event_apply(
        research_event(entity_id="doc_nv", occurred_at=t, event_id="evt_b")
    )
    older = document_event_apply(
        research_event(
            entity_id="doc_nv", occurred_at=t - timedelta(seconds=1), event_id="evt_z"
        )
    )
    tie_lower = document_event_apply(
        research_event(entity_id="doc_nv", occurred_at=t, event_id="evt_a")
    )
    tie_higher = document_event_apply(
        research_event(entity_id="doc_nv", occurred_at=t, event_id="evt_c")
    )
    assert first.processing_status == "processed"
    assert older.processing_status == "ignored_out_of_order"
    assert tie_lower.processing_status == "ignored_out_of_order"
    assert tie_higher.processing_status == "processed"
    doc = ResearchDocument.objects.get(entity_id="doc_nv")
    assert doc.last_event_id == "evt_c"
    assert doc.current_source_version is None


def test_unknown_event_type_is_ignored_unsupported_without_a_document():
    event = document_event_apply(
        research_event(entity_id="doc_u", event_type="research.document.archived")
    )
    assert event.processing_status == "ignored_unsupported"
    assert not ResearchDocument.objects.filter(entity_id="doc_u").exists()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"summary": 12}, "data.summary must be a string"),
        ({"authors": "A, B"}, "data.authors must be a list"),
        ({"authors": ["A", 3]}, "data.authors[1] must be a string"),
        ({"citations": {"text": "x"}}, "data.citations must be a list"),
        ({"citations": ["x"]}, "data.citations[0] must be an object"),
        (
            {"citations": [{"text": "x", "reference_url": "/relative/path"}]},
            "absolute http(s) URL",
        ),
        (
            {"citations": [{"text": "x", "reference_url": "ftp://example.org/a"}]},
            "absolute http(s) URL",
        ),
        (
            {"citations": [{"text": 5, "reference_url": "https://example.org/"}]},
            "data.citations[0].text must be a string",
        ),
        ([1, 2], "data must be an object"),
    ],
)
def test_invalid_data_dead_letters_at_once_with_the_reason(data, reason):
    event = document_event_apply(
        research_event(entity_id="doc_bad", source_version=1, data=data)
    )
    assert event.processing_status == "dead_lettered"
    assert event.attempts == 1
    assert reason in event.error_message
    assert event.next_attempt_at is None
    assert not ResearchDocument.objects.filter(entity_id="doc_bad").exists()
    (attempt,) = InboxAttempt.objects.filter(event=event)
    assert attempt.outcome == "dead_lettered"
    assert reason in attempt.error


def test_invalid_data_does_not_touch_an_existing_document():
    document_event_apply(research_event(entity_id="doc_keep", source_version=1))
    before = ResearchDocument.objects.get(entity_id="doc_keep")
    bad = document_event_apply(
        research_event(entity_id="doc_keep", source_version=2, data={"authors": [None]})
    )
    after = ResearchDocument.objects.get(entity_id="doc_keep")
    assert bad.processing_status == "dead_lettered"
    assert (after.current_source_version, after.summary, after.updated_at) == (
        1,
        before.summary,
        before.updated_at,
    )
