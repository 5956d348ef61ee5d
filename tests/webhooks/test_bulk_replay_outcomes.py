"""A bulk replay job says what became of the events it replayed, links them, and its page
reloads itself while the job runs."""

import pytest
from django.urls import reverse

from core.actors import Actor
from tests.webhooks.bulk_replay import dead_job
from webhooks.models import BulkReplayJob, InboxEvent
from webhooks.replay import inbox_events_replay

pytestmark = pytest.mark.django_db


@pytest.fixture
def replayed_job(operator):
    """A job that replayed four dead letters (as its chunks do): two processed since, one
    dead-lettered again, one still waiting."""
    job, dead = dead_job(4)
    inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk__in=[e.pk for e in dead]),
        actor=Actor.of(operator),
        reason=job.reason,
        action="bulk_replay",
        bulk_job=job,
    )
    for event, status in zip(
        dead,
        ["processed", "processed", "dead_lettered", "received"],
        strict=True,
    ):
        InboxEvent.objects.filter(pk=event.pk).update(processing_status=status)
    BulkReplayJob.objects.filter(pk=job.pk).update(
        state=BulkReplayJob.State.SUCCEEDED, processed=4, total=4
    )
    return job, dead


def test_the_job_counts_its_outcomes_and_links_the_events(auditor_client, replayed_job):
    job, dead = replayed_job
    inbox = reverse("admin:webhooks_inboxevent_changelist")
    for url in (
        reverse("admin:webhooks_bulkreplayjob_changelist"),
        reverse("admin:webhooks_bulkreplayjob_change", args=[job.pk]),
    ):
        page = auditor_client.get(url).content.decode()
        assert f'<a href="{inbox}?bulk_job={job.pk}">4 replayed</a>' in page
        assert "2 processed</a>, " in page
        assert "1 dead-lettered again</a>" in page
        assert "1 waiting</a>" in page

    def listed(**params):
        response = auditor_client.get(inbox, {"bulk_job": job.pk, **params})
        assert response.status_code == 200
        return {obj.pk for obj in response.context["cl"].result_list}

    assert listed() == {e.pk for e in dead}
    assert listed(processing_status__exact="dead_lettered") == {dead[2].pk}
    assert listed(bulk_job=job.pk + 1) == set()


def test_the_job_page_reloads_itself_while_the_job_runs(auditor_client, replayed_job):
    job, _ = replayed_job
    url = reverse("admin:webhooks_bulkreplayjob_change", args=[job.pk])
    refresh = '<meta http-equiv="refresh" content="5">'
    assert refresh not in auditor_client.get(url).content.decode()
    BulkReplayJob.objects.filter(pk=job.pk).update(state=BulkReplayJob.State.RUNNING)
    assert refresh in auditor_client.get(url).content.decode()


def test_a_job_that_replayed_nothing_yet_says_so(auditor_client):
    job, _ = dead_job(2)
    page = auditor_client.get(
        reverse("admin:webhooks_bulkreplayjob_change", args=[job.pk])
    ).content.decode()
    assert "nothing replayed yet" in page
    assert "Filter:</label>" in page and "Dead-lettered, source " in page
