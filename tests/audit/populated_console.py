"""A console with a row of every kind an operator meets, made through the product's own
services wherever one exists: every ledger sealed in a checkpoint (``sealed_trail``), an
event with a whole story (rounds, replays, a bulk replay, its document), every processing
status, a paused source and a resumed one, bulk replay jobs started, cancelled and resumed,
a deploy target created, changed and tested, deployments and builds in every status with
trigger attempts of every outcome, and operator actions of every kind."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from audit.roles import OPERATORS
from core.actors import Actor
from deployments.models import (
    Build,
    Deployment,
    DeployTarget,
    JobStatus,
    JobTransition,
    TriggerAttempt,
    TriggerPhase,
)
from deployments.targets import deploy_target_save, deploy_target_test_request
from tests.audit.ledger_rows import Trail, sealed_trail
from tests.audit.test_console_browser import realistic_console
from tests.console import make_user
from tests.deployments.factories import BuildFactory, DeploymentFactory
from tests.idempotency.factories import IdempotencyRecordFactory
from tests.webhooks.event_story import EventStory, event_with_a_story
from tests.webhooks.factories import (
    DeadLetteredEventFactory,
    InboxEventFactory,
    WebhookSourceFactory,
)
from trail.api_clients import api_client_create, api_client_set_active
from webhooks.bulk_replay import (
    bulk_replay_job_cancel,
    bulk_replay_job_create,
    bulk_replay_job_resume,
    bulk_replay_job_start,
)
from webhooks.investigations import fingerprint_mismatches_mark_investigated
from webhooks.models import (
    BulkReplayJob,
    FingerprintMismatch,
    InboxEvent,
    ProcessingStatus,
    SignatureFailure,
)
from webhooks.pausing import webhook_source_pause, webhook_source_resume
from webhooks.replay import inbox_events_replay
from webhooks.retention import inbox_bodies_purge
from webhooks.sources import (
    webhook_source_create,
    webhook_source_expected_interval_set,
    webhook_source_set_enabled,
)

# Names as an operator typed them: no page may capitalise them.
TARGET_NAME = "staging-cd"
RESUMED_SOURCE = "orders-eu"


@dataclass
class Console:
    trail: Trail
    story: EventStory
    target: DeployTarget
    failed: Deployment
    running: Build
    cancelled_job: BulkReplayJob
    held: InboxEvent
    resumed_source_slug: str


def _jobs(target: DeployTarget) -> tuple[Deployment, Build]:
    """A deployment failed when its report never came, and a build running after a
    transient first attempt: every trigger attempt outcome, with durations as measured."""
    now = timezone.now()
    failed = DeploymentFactory(
        repository="acme/checkout",
        environment="production",
        idempotency_key="dep-lost",
        status=JobStatus.FAILED,
        executor="http",
        target=target,
        trigger_phase=TriggerPhase.GAVE_UP,
        executor_started_at=now - timedelta(minutes=20),
        detail="report_lost: reported running, but no further report came within "
        "the lease",
    )
    running = BuildFactory(
        repository="acme/checkout",
        ref="refs/heads/main",
        idempotency_key="bld-running",
        status=JobStatus.RUNNING,
        executor="http",
        target=target,
        trigger_phase=TriggerPhase.TRIGGERED,
        executor_started_at=now - timedelta(minutes=5),
    )
    for job, to in ((failed, JobStatus.RUNNING), (running, JobStatus.RUNNING)):
        JobTransition.objects.create(
            job=job,
            from_status=JobStatus.QUEUED,
            to_status=to,
            actor="worker:w1/42",
        )
    JobTransition.objects.create(
        job=failed,
        from_status=JobStatus.RUNNING,
        to_status=JobStatus.FAILED,
        actor="sweep",
        detail=failed.detail,
    )
    outcomes = [
        (failed, "transient", 503, 0.04496838000000025),
        (failed, "ambiguous", None, 10.000311),
        (failed, "rejected", 422, 0.1234567),
        (failed, "lost", None, None),
        (running, "transient", 429, 1.98765432),
        (running, "delivered", 202, 0.31415926),
    ]
    numbers: dict[int, int] = {}
    for job, outcome, code, seconds in outcomes:
        number = numbers[id(job)] = numbers.get(id(job), 0) + 1
        TriggerAttempt.objects.create(
            job=job,
            number=number,
            executor="http",
            target_name=target.name,
            url="https://ci.example.com/hooks/deploy",
            started_at=now - timedelta(minutes=15 - number),
            finished_at=now - timedelta(minutes=15 - number) + timedelta(seconds=1),
            outcome=outcome,
            status_code=code,
            error_class="HTTPStatusError" if code else "",
            error=f"HTTP {code}" if code else "",
            duration_seconds=seconds,
            worker="w1@host",
        )
    return failed, running


def populated_console(settings, operator) -> Console:
    """Every kind of row; ``operator`` acts for most of them."""
    trail = sealed_trail(settings)  # first: it copies rows into empty tables
    actor = Actor.of(operator)
    night = make_user("night-operator", OPERATORS)
    story = event_with_a_story(replayer=operator, bulk_replayer=night)
    realistic_console(operator)

    # A source paused with events held, then resumed (a drain), and one paused now with a
    # held event of its own.
    resumed, _ = webhook_source_create(
        slug=RESUMED_SOURCE, scheme="hmac-sha256", handler="research", actor=actor
    )
    for _ in range(4):
        InboxEventFactory(source=resumed)
    webhook_source_pause(source=resumed, reason="downstream migration", actor=actor)
    webhook_source_resume(source=resumed, actor=actor, rate=2.5, reason="migrated")
    webhook_source_expected_interval_set(source=resumed, seconds=3600, actor=actor)
    flaky = WebhookSourceFactory(slug="partner-feed")
    webhook_source_set_enabled(
        source=flaky, enabled=False, actor=actor, reason="partner offboarded"
    )
    webhook_source_set_enabled(
        source=flaky, enabled=True, actor=actor, reason="partner back"
    )
    held_source = WebhookSourceFactory(slug="crm-sync")
    held = InboxEventFactory(source=held_source)
    webhook_source_pause(source=held_source, reason="CRM maintenance", actor=actor)

    # Replays, evidence and retention.
    dead = DeadLetteredEventFactory.create_batch(2)
    inbox_events_replay(
        events_queryset=InboxEvent.objects.filter(pk__in=[e.pk for e in dead]),
        actor=actor,
        reason="handler fixed",
    )
    fingerprint_mismatches_mark_investigated(
        mismatches=FingerprintMismatch.objects.filter(event=story.event),
        actor=actor,
        note="the producer re-sent after a schema change",
    )
    InboxEventFactory(
        processing_status=ProcessingStatus.PROCESSED,
        received_at=timezone.now() - timedelta(days=120),
        processed_at=timezone.now() - timedelta(days=120),
    )
    inbox_bodies_purge(older_than=timezone.now() - timedelta(days=90), actor=actor)

    # Bulk replay jobs: one cancelled and resumed, every control an operator action.
    for _ in range(2):
        DeadLetteredEventFactory()
    job = bulk_replay_job_create(
        source=None,
        status=ProcessingStatus.DEAD_LETTERED,
        since=None,
        event_ids=[],
        reason="replay after the index fix",
        rate=2.5,
        created_by=actor,
    )
    job = bulk_replay_job_start(job=job, started_by=actor, publish=False)
    bulk_replay_job_cancel(job_id=job.pk, reason="too early", cancelled_by=actor)
    bulk_replay_job_resume(
        job_id=job.pk, resumed_by=actor, reason="index is up", rate=5, publish=False
    )
    bulk_replay_job_cancel(
        job_id=job.pk, reason="overnight instead", cancelled_by=actor
    )
    job.refresh_from_db()

    # A deploy target as typed, changed, tested; API clients made and switched.
    target = DeployTarget(
        name=TARGET_NAME,
        executor="http",
        url="https://ci.example.com/hooks/deploy",
        repository_pattern="acme/*",
    )
    deploy_target_save(
        target=target, secret="whsec_" + "a" * 32, actor=actor, reason="new CI"
    )
    target.priority = 10
    deploy_target_save(target=target, secret=None, actor=actor, reason="first")
    deploy_target_test_request(target=target, actor=actor)
    client, _ = api_client_create(name="release-bot", actor=actor)
    api_client_set_active(client=client, active=False, actor=actor)
    api_client_set_active(client=client, active=True, actor=actor)
    failed, running = _jobs(target)

    IdempotencyRecordFactory(key="dep-lost", status="succeeded")
    SignatureFailure.objects.create(
        source=resumed,
        reason="mismatch",
        window_start=timezone.now().replace(second=0, microsecond=0),
        count=3,
    )
    return Console(
        trail=trail,
        story=story,
        target=target,
        failed=failed,
        running=running,
        cancelled_job=job,
        held=held,
        resumed_source_slug=resumed.slug,
    )
