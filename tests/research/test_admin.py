"""The research documents' pages as an auditor reads them: the document's state in words, its
revisions titled by document and version, event ids that link to the events' pages, and the
events the document ignored."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.console import make_user
from tests.webhooks.event_story import event_with_a_story

pytestmark = pytest.mark.django_db


@pytest.fixture
def story(roles, operator):
    return event_with_a_story(
        replayer=operator, bulk_replayer=make_user("night-operator", "Operators")
    )


def test_a_revision_is_titled_by_its_document_and_version(story):
    assert str(story.revision) == "doc_story42 v5 (updated)"


def test_the_document_list_says_live_or_deleted_not_a_tick(auditor_client, story):
    url = reverse("admin:research_researchdocument_changelist")
    html = auditor_client.get(url).content.decode()
    assert (
        '<td class="field-state"><span class="badge badge-ok" data-status="live">Live'
        in html
    )
    assert "icon-yes.svg" not in html and "icon-no.svg" not in html
    story.document.is_deleted = True
    story.document.save(update_fields=["is_deleted"])
    html = auditor_client.get(url).content.decode()
    assert 'data-status="deleted">Deleted</span></td>' in html
    # The filter says live or deleted too, in the same words, and filters by it.
    assert 'href="?is_deleted__exact=1"' in html and ">Deleted</a>" in html

    def shown(value: str) -> list[str]:
        response = auditor_client.get(url, {"is_deleted__exact": value})
        assert response.status_code == 200
        return [d.entity_id for d in response.context["cl"].result_list]

    assert shown("1") == ["doc_story42"]
    assert shown("0") == []


def test_the_document_page_links_its_revisions_events_and_the_events_it_ignored(
    auditor_client, story
):
    page = auditor_client.get(
        reverse("admin:research_researchdocument_change", args=[story.document.pk])
    ).content.decode()
    event_page = reverse("admin:webhooks_inboxevent_change", args=[story.event.pk])
    revision_page = reverse(
        "admin:research_documentrevision_change", args=[story.revision.pk]
    )
    assert f'<a href="{event_page}">{story.event.event_id}</a>' in page
    assert revision_page in page
    assert re.search(r'<div class="readonly"><span [^>]*data-status="live">Live', page)
    ignored = page[page.index('id="ignored-events"') :]
    ignored = ignored[: ignored.index("</ul>")]
    ignored_page = reverse("admin:webhooks_inboxevent_change", args=[story.ignored.pk])
    assert f'<a href="{ignored_page}">{story.ignored.event_id}</a>' in ignored
    assert (
        'v4 <span class="badge badge-ignored" data-status="ignored_out_of_order">'
        in ignored
    )
    assert ">Ignored (out of order)</span>" in ignored
    assert "is not newer than the document&#x27;s current version 5" in ignored
    assert story.event.event_id not in ignored  # applied, not ignored


def test_the_revision_page_and_list_link_the_event(auditor_client, story):
    event_page = reverse("admin:webhooks_inboxevent_change", args=[story.event.pk])
    detail = auditor_client.get(
        reverse("admin:research_documentrevision_change", args=[story.revision.pk])
    ).content.decode()
    assert f'<a href="{event_page}">{story.event.event_id}</a>' in detail
    assert "doc_story42 v5 (updated)" in detail
    listing = auditor_client.get(
        reverse("admin:research_documentrevision_changelist")
    ).content.decode()
    # The list's long ids may wrap at their separators only (<wbr>).
    listing = listing.replace("<wbr>", "")
    assert f'<a href="{event_page}">{story.event.event_id}</a>' in listing
    assert "doc_story42 v5 (updated)" in listing


def test_a_document_without_ignored_events_says_none(auditor_client):
    from tests.webhooks.factories import InboxEventFactory
    from webhooks.processing import inbox_event_process

    event = InboxEventFactory()
    inbox_event_process(inbox_event_id=event.pk)
    from research.models import ResearchDocument

    document = ResearchDocument.objects.get(entity_id=event.entity_id)
    page = auditor_client.get(
        reverse("admin:research_researchdocument_change", args=[document.pk])
    ).content.decode()
    assert 'id="ignored-events"' not in page
    assert '<div class="readonly">none</div>' in page
