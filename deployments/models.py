from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.fields.json import KT
from django.utils import timezone

from core.models import (
    ApiClient,
    AppendOnlyError,
    BaseModel,
    log_ticket_field,
    log_ticket_indexes,
)

from .executors import executor_choices
from .trigger_urls import url_query_fingerprint, url_shown


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class JobKind(models.TextChoices):
    """A job's kind, as its task's argument, its FK's name and its API's path name it."""

    DEPLOYMENT = "deployment"
    BUILD = "build"


TERMINAL_JOB_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED})

# The longest ``detail`` a status report may carry (docs/http-api.md, "Status sync"); GitHub's
# deployment status descriptions are cut to the same length.
REPORTED_DETAIL_MAX_LENGTH = 1000


class TriggerPhase(models.TextChoices):
    """Where a job run by a trigger executor (``http``, ``github``) stands, so that recovery
    knows what it may repeat (docs/subsystems/executors.md, "A deployment or build job")."""

    NONE = "", "-"
    # An attempt is open: its request may have left. Only the same id may be sent again.
    SENT = "trigger_sent", "trigger sent"
    # The last attempt failed in a way a retry may fix; the retry is due at next_attempt_at.
    RETRY_WAIT = "retry_wait", "waiting for a retry"
    # The downstream accepted the job (a 2xx; a GitHub deployment exists): never sent again.
    TRIGGERED = "triggered", "triggered"
    # Refused, or unreachable on every attempt: the job failed.
    GAVE_UP = "gave_up", "gave up"


class BreakerState(models.TextChoices):
    """A deploy target's circuit breaker: ``closed`` lets every trigger through; ``open``
    holds them (they wait, queued) until its cool-down ends; ``half_open`` lets one job's
    attempt through, whose outcome closes or opens it again."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open", "half-open (one probe)"


def public_id_generate(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def secret_fingerprint(secret: str) -> str:
    """What the admin shows of a secret it never shows: enough to tell two apart."""
    if not secret:
        return ""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()[:12]


class DeployTarget(models.Model):
    """Where matching jobs go (docs/http-api.md, "Executors"): an executor with its URL and
    secret, for the jobs whose repository and environment match its patterns. Jobs no
    enabled target matches use ``DEPLOY_EXECUTOR``. Operators create and change targets in
    the admin; each change is an operator action. Never deleted (disable one instead): the
    jobs it routed name it."""

    class AppliesTo(models.TextChoices):
        ALL = "", "deployments and builds"
        DEPLOYMENTS = "deployments", "deployments only"
        BUILDS = "builds", "builds only"

    # No index of its own: the unique constraint on it is one.
    name = models.SlugField(max_length=64, db_index=False)
    repository_pattern = models.CharField(
        max_length=200,
        default="*",
        help_text="A glob over owner/name, compared lower-cased: acme/*, acme/shop.",
    )
    environment_pattern = models.CharField(
        max_length=64,
        default="*",
        help_text="A glob over the deployment's environment: prod*, staging. Builds have "
        "none: a target routes builds only with *.",
    )
    applies_to = models.CharField(
        max_length=16, choices=AppliesTo.choices, blank=True, default=AppliesTo.ALL
    )
    priority = models.PositiveSmallIntegerField(
        default=100, help_text="Of several matching targets, the lowest number wins."
    )
    # From the registry: a new executor needs no migration.
    executor = models.CharField(max_length=32, choices=executor_choices)
    url = models.URLField(
        max_length=500,
        blank=True,
        default="",
        help_text="http: the receiver's URL. github: the API's URL (empty: GITHUB_API_URL).",
    )
    # Write-only in the admin (shown as its fingerprint); needed in clear to sign and call.
    secret = models.CharField(max_length=255, blank=True, default="")
    # A target that names API clients serves their jobs only; unnamed, it serves every
    # client's (one tenant: docs/security.md, "Deploy targets and API clients").
    clients = models.ManyToManyField(
        ApiClient,
        blank=True,
        related_name="+",
        verbose_name="API clients",
        help_text=(
            "The API clients whose jobs this target serves; another client's jobs go "
            "past it. Empty: every client's (a single tenant)."
        ),
    )
    is_enabled = models.BooleanField(default=True)
    # At most this many of its jobs in flight (triggered or being triggered, not finished);
    # the next wait, in job order, without holding a worker. Null: no limit.
    max_in_flight = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="At most this many of its jobs triggered and not finished at once; "
        "the next wait their turn, in job order. Empty: no limit.",
    )
    # Its circuit breaker (docs/subsystems/executors.md, "A target's breaker"): state, the
    # failed attempts in a row and when the last one failed, when the state last changed,
    # and the job whose attempt probes a half-open breaker. Changed by the attempts'
    # outcomes and by operators, each change an operator action.
    breaker_state = models.CharField(
        max_length=16, choices=BreakerState.choices, default=BreakerState.CLOSED
    )
    breaker_failures = models.PositiveIntegerField(default=0)
    breaker_failed_at = models.DateTimeField(null=True, blank=True)
    breaker_changed_at = models.DateTimeField(null=True, blank=True)
    breaker_probe = models.ForeignKey(
        "Job",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["name"], name="deployments_target_name_uniq"
            ),
        ]
        ordering = ["priority", "id"]
        permissions = [("test_deploytarget", "Can send a test trigger to a target")]

    def __str__(self) -> str:
        return self.name

    @property
    def secret_fingerprint(self) -> str:
        return secret_fingerprint(self.secret)

    def settings_snapshot(
        self, *, clients: Iterable[ApiClient] | None = None
    ) -> dict[str, Any]:
        """What an operator action records of the target: its settings, the secret only as
        its fingerprint, the URL without its query (a Jenkins ``?token=``) and the query
        as its fingerprint (docs/security.md, "Deploy targets"), the API clients it serves
        by id and name (``clients``: as it is to be saved; default: as it is stored)."""
        if clients is None:
            clients = self.clients.all() if self.pk is not None else ()
        return {
            "name": self.name,
            "repository_pattern": self.repository_pattern,
            "environment_pattern": self.environment_pattern,
            "applies_to": self.applies_to,
            "priority": self.priority,
            "executor": self.executor,
            "url": url_shown(self.url) if self.url else "",
            "url_query": url_query_fingerprint(self.url),
            "secret": self.secret_fingerprint,
            "clients": [
                {"id": client.pk, "name": client.name}
                for client in sorted(clients, key=lambda client: client.pk)
            ],
            "is_enabled": self.is_enabled,
            "max_in_flight": self.max_in_flight,
        }


# A test trigger no worker took within this long is never sent (it would surprise whoever
# asked for it long after), and is shown as not sent.
TEST_EXPIRES_SECONDS = 300


class DeployTargetTest(models.Model):
    """One "Send test trigger" of a deploy target (docs/security.md, "Deploy targets"):
    asked for in the admin (an operator action, recorded with this row), sent by a worker,
    which records here what came back, in coarse words only: delivered, the receiver's
    answer by its class (``4xx``), or not reached. Which of refused, timed out, unresolvable
    or denied it was, and any address, are kept from it: the test must not tell an operator
    which internal ports answer."""

    class State(models.TextChoices):
        QUEUED = "queued", "waiting for a worker"
        SENDING = "sending", "being sent"
        DONE = "done", "done"
        NOT_SENT = "not_sent", "not sent"

    class Outcome(models.TextChoices):
        NONE = "", "-"
        DELIVERED = "delivered", "delivered (HTTP 2xx)"
        ANSWERED = "answered", "the receiver answered"
        NOT_REACHED = "not_reached", "not reached (no HTTP answer)"
        NOTHING = "nothing", "nothing to send: this executor calls nothing"

    # No index of its own: ``deployments_test_target_idx`` leads with it.
    target = models.ForeignKey(
        DeployTarget, on_delete=models.PROTECT, related_name="tests", db_index=False
    )
    # The test message's webhook-id (tst_...), fresh per test.
    message_id = models.CharField(max_length=32)
    requested_at = models.DateTimeField(default=timezone.now)
    requested_by_name = models.CharField(max_length=255)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16, choices=Outcome.choices, blank=True, default=Outcome.NONE
    )
    # Of an answer other than a 2xx, its class only: "4xx".
    status_class = models.CharField(max_length=3, blank=True, default="")
    # Why a test was not sent.
    reason = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["target", "-id"], name="deployments_test_target_idx")
        ]

    def __str__(self) -> str:
        return f"test {self.message_id} of {self.target_id}"

    def summary(self, *, now: datetime | None = None) -> str:
        """What the admin shows of the test."""
        now = now or timezone.now()
        if self.state == self.State.QUEUED:
            if self.expired(now=now):
                return f"not sent: no worker took it within {TEST_EXPIRES_SECONDS} s"
            return str(self.State.QUEUED.label)
        if self.state == self.State.SENDING:
            if self.lost(now=now):
                return "no outcome: its worker was lost"
            return str(self.State.SENDING.label)
        if self.state == self.State.NOT_SENT:
            return f"not sent: {self.reason}"
        if self.outcome == self.Outcome.ANSWERED:
            return f"the receiver answered HTTP {self.status_class}"
        return str(self.Outcome(self.outcome).label)

    def expired(self, *, now: datetime) -> bool:
        return self.requested_at + timedelta(seconds=TEST_EXPIRES_SECONDS) < now

    def lost(self, *, now: datetime) -> bool:
        started = self.started_at or self.requested_at
        return started + timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT) < now

    def pending(self, *, now: datetime | None = None) -> bool:
        """Whether an outcome may still come (the admin reloads meanwhile)."""
        now = now or timezone.now()
        if self.state == self.State.QUEUED:
            return not self.expired(now=now)
        return self.state == self.State.SENDING and not self.lost(now=now)


class JobKindManager(models.Manager):
    """The jobs of one kind: what ``Deployment.objects`` and ``Build.objects`` see of the
    one job table."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().filter(kind=self.kind)


class Job(BaseModel):
    """A deployment or a build (``kind``; its proxy model, ``Deployment`` or ``Build``, is
    what the API, the admin and the services name): the triggering client and key, the
    status lifecycle driven by the worker (and by external reports), and the executor guard.
    Both kinds live in this one table (docs/subsystems/executors.md, "Migration 0009: one job
    table"); a row read through ``Job`` comes back as its kind's model.

    ``executor_started_at`` is set in the committed transaction that claims the job, before
    the executor runs, with the executor the claim chose (a deploy target's, or
    ``DEPLOY_EXECUTOR``): a job with it set is never claimed again. A ``simulated`` job's
    executor is never run a second time; an ``http`` or ``github`` job is triggered again only
    under its one id, while ``trigger_phase`` says it may be (docs/subsystems/executors.md)."""

    # Set by each kind's model.
    kind_value = ""
    public_id_prefix = ""
    # The request fields of its kind beyond those every job has (``services.job_new``).
    request_fields: tuple[str, ...] = ()

    kind = models.CharField(max_length=16, choices=JobKind.choices)
    public_id = models.CharField(max_length=32, editable=False)
    # A build moved here from the builds' own table keeps its id there as its record's id
    # in the audit log (``audit.ledgers``): leaves already logged never change. Null for
    # every other job, whose record id is its primary key.
    ledger_id = models.BigIntegerField(null=True, blank=True, editable=False)
    # No index of its own: the (client, idempotency_key) index serves it.
    client = models.ForeignKey(
        ApiClient, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    idempotency_key = models.CharField(max_length=255)
    repository = models.CharField(max_length=200)
    commit_sha = models.CharField(max_length=40)
    workflow = models.CharField(max_length=200, blank=True, default="")
    triggered_by = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(
        max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED
    )
    # When the current status was reported or reached: external reports older than this are
    # not applied.
    status_changed_at = models.DateTimeField(default=timezone.now)
    # When a run message was last published for the job; null while it waits for one: its
    # first (the relay's claim, through the partial "outbox" index) or a trigger retry's, once
    # due (through the partial "retry" index on next_attempt_at).
    last_dispatched_at = models.DateTimeField(null=True, blank=True)
    executor_started_at = models.DateTimeField(null=True, blank=True)
    executor_finished_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=255, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    detail = models.TextField(blank=True, default="")
    log_ticket = log_ticket_field()
    # The executor the claim chose, and the deploy target that chose it (none: the default).
    executor = models.CharField(max_length=32, blank=True, default="")
    target = models.ForeignKey(
        DeployTarget,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )
    trigger_phase = models.CharField(
        max_length=16,
        choices=TriggerPhase.choices,
        blank=True,
        default=TriggerPhase.NONE,
    )
    trigger_attempt_count = models.PositiveIntegerField(default=0)
    # When the next trigger attempt is due (RETRY_WAIT).
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    # A deployment's (empty for a build).
    environment = models.CharField(max_length=64)
    # The highest GitHub deployment_status id applied; lower or equal ids are out of order.
    last_github_status_id = models.BigIntegerField(null=True, blank=True)
    # The GitHub deployment that carries this job (the github executor created it, or a
    # status delivery named this job in its payload): its statuses match it exactly.
    github_deployment_id = models.BigIntegerField(null=True, blank=True)
    # The full commit GitHub reported for it: a short commit_sha then matches that commit
    # only, not any other with the same prefix.
    github_commit_sha = models.CharField(max_length=40, blank=True, default="")

    # A build's (empty for a deployment).
    ref = models.CharField(max_length=255, blank=True, default="")

    # What the trigger started (``deployments.downstream``): {"system", "id", "url"}, set
    # when an attempt is delivered (the one the API answers); null until then, and for a
    # job no trigger carried.
    downstream = models.JSONField(null=True, blank=True, default=None)
    # The W3C traceparent of the request that made the job (core/tracing.py), written by the
    # statement that inserts it; "" when tracing is off (a database default only: a job
    # built without one leaves the column out of its INSERT). Not part of any leaf of the
    # verifiable log.
    traceparent = models.CharField(
        max_length=55, blank=True, db_default="", editable=False
    )

    objects: ClassVar[models.Manager] = models.Manager()

    class Meta:
        # The constraint's and the indexes' names are those they had when this table held
        # the deployments only: migration 0009 kept them rather than build them again.
        constraints = [
            models.UniqueConstraint(
                fields=["public_id"], name="deployments_deployment_public_id_uniq"
            ),
        ]
        indexes = [
            models.Index(
                fields=["client", "idempotency_key"],
                name="deployments_dep_client_key_idx",
            ),
            # A client's list of one kind, newest first, reads its own rows of that kind
            # only (no walk over other clients' or the other kind's newer rows), on every
            # page.
            models.Index(
                fields=["client", "id"],
                name="deployments_dep_client_id_idx",
                condition=Q(kind="deployment"),
            ),
            models.Index(
                fields=["client", "id"],
                name="deployments_bld_client_id_idx",
                condition=Q(kind="build"),
            ),
            models.Index(
                fields=["status", "last_dispatched_at"],
                name="deployments_dep_sweep_idx",
                condition=Q(status__in=["queued", "running"]),
            ),
            models.Index(
                fields=["id"],
                name="deployments_dep_outbox_idx",
                condition=Q(
                    status="queued",
                    last_dispatched_at__isnull=True,
                    executor_started_at__isnull=True,
                ),
            ),
            models.Index(
                fields=["next_attempt_at"],
                name="deployments_dep_retry_idx",
                condition=Q(
                    status="queued",
                    last_dispatched_at__isnull=True,
                    next_attempt_at__isnull=False,
                ),
            ),
            models.Index(
                fields=["repository", "environment", "-id"],
                name="deployments_dep_github_idx",
            ),
            models.Index(
                fields=["github_deployment_id"],
                name="deployments_dep_github_id_idx",
                condition=Q(github_deployment_id__isnull=False),
            ),
            models.Index(
                fields=["status", "-created_at"], name="deployments_dep_status_idx"
            ),
            models.Index(
                fields=["ledger_id"],
                name="deployments_job_ledger_id_idx",
                condition=Q(ledger_id__isnull=False),
            ),
            # A deploy target's jobs in flight, and those waiting for their first attempt
            # (``services.breakers``): counted per attempt of a target with a limit, each
            # through its own few entries.
            models.Index(
                fields=["target", "id"],
                name="deployments_job_flight_idx",
                condition=Q(
                    target__isnull=False,
                    status__in=["queued", "running"],
                    trigger_attempt_count__gt=0,
                ),
            ),
            models.Index(
                fields=["target", "id"],
                name="deployments_job_turn_idx",
                condition=Q(
                    target__isnull=False,
                    status="queued",
                    trigger_attempt_count=0,
                    trigger_phase="retry_wait",
                ),
            ),
            # A GitHub workflow_run delivery finds the job that holds its run.
            models.Index(
                KT("downstream__id"),
                name="deployments_job_downstream_idx",
                condition=Q(downstream__isnull=False),
            ),
            *log_ticket_indexes("deployments_dep"),
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Set when built, not when saved: the Idempotency-Key mechanism inserts a new job
        # itself (``OperationResult.resource_row``).
        if not self.kind and self.kind_value:
            self.kind = self.kind_value

    def __str__(self) -> str:
        return self.public_id

    @classmethod
    def from_db(cls, db: Any, field_names: Any, values: Any) -> Job:
        instance = super().from_db(db, field_names, values)
        # A job read through the table (a transition's, an attempt's) is its kind's model.
        model = JOB_KIND_MODELS.get(instance.__dict__.get("kind", ""))
        if cls is Job and model is not None:
            instance.__class__ = model
        return instance

    def save(self, *args, **kwargs):
        if not self.kind:
            self.kind = self.kind_value
        if not self.public_id:
            self.public_id = public_id_generate(
                JOB_KIND_MODELS[self.kind].public_id_prefix
            )
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        path = "deployments" if self.kind == JobKind.DEPLOYMENT else "builds"
        return f"/api/{path}/{self.public_id}/"

    @property
    def record_id(self) -> int:
        """Its record's id in the audit log."""
        return self.ledger_id if self.ledger_id is not None else self.pk


class Deployment(Job):
    kind_value = JobKind.DEPLOYMENT
    public_id_prefix = "dep"
    request_fields = ("environment",)

    objects: ClassVar[JobKindManager] = JobKindManager(JobKind.DEPLOYMENT)

    class Meta:
        proxy = True


class Build(Job):
    kind_value = JobKind.BUILD
    public_id_prefix = "bld"
    request_fields = ("ref",)

    objects: ClassVar[JobKindManager] = JobKindManager(JobKind.BUILD)

    class Meta:
        proxy = True


JOB_KIND_MODELS: dict[str, type[Job]] = {
    JobKind.DEPLOYMENT: Deployment,
    JobKind.BUILD: Build,
}


class JobTransition(models.Model):
    """One status change of a deployment or build (append-only): from, to, when, by whom."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="transitions")
    from_status = models.CharField(max_length=16, choices=JobStatus.choices)
    to_status = models.CharField(max_length=16, choices=JobStatus.choices)
    at = models.DateTimeField(default=timezone.now)
    # worker:<hostname>/<pid>, sweep, status-sync:<client>, github:<delivery>
    actor = models.CharField(max_length=255)
    detail = models.TextField(blank=True, default="")
    recorded_at = models.DateTimeField(default=timezone.now)
    log_ticket = log_ticket_field()

    class Meta:
        indexes = [*log_ticket_indexes("deployments_trans")]

    def __str__(self) -> str:
        # Named, not told: a page shows the statuses themselves, in their words.
        return f"transition #{self.pk}"


class StatusSync(BaseModel):
    """An external report of a deployment's or build's status, with whether it applied."""

    public_id = models.CharField(max_length=32, editable=False)
    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="status_syncs")
    status = models.CharField(max_length=16, choices=JobStatus.choices)
    reported_at = models.DateTimeField()
    detail = models.TextField(blank=True, default="")
    applied = models.BooleanField()
    resulting_status = models.CharField(max_length=16, choices=JobStatus.choices)
    log_ticket = log_ticket_field()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["public_id"], name="deployments_statussync_public_id_uniq"
            ),
        ]
        indexes = [
            models.Index(
                fields=["applied", "-created_at"], name="deployments_sync_applied_idx"
            ),
            *log_ticket_indexes("deployments_sync"),
        ]

    def __str__(self) -> str:
        return self.public_id

    def save(self, *args, **kwargs):
        if not self.public_id:
            self.public_id = public_id_generate("ss")
        super().save(*args, **kwargs)


class TriggerAttemptQuerySet(models.QuerySet):
    """Attempts are a ledger: rows are added, and an open attempt is closed once
    (``close``); nothing else updates or deletes them."""

    def update(self, **kwargs):
        raise AppendOnlyError("TriggerAttempt rows are append-only")

    def delete(self):
        raise AppendOnlyError("TriggerAttempt rows are append-only")

    def close(self, **outcome: Any) -> int:
        """Closes the attempts of this queryset that are still open with ``outcome`` (its
        ``finished_at`` among it); returns how many. A closed attempt is never changed."""
        return models.QuerySet.update(self.filter(finished_at__isnull=True), **outcome)


class TriggerAttempt(models.Model):
    """One attempt to trigger a job downstream (append-only): opened and committed before
    the request leaves, closed once with what came back. Its fields never change once it is
    closed."""

    class Outcome(models.TextChoices):
        STARTED = "started"  # open: no outcome recorded yet
        DELIVERED = "delivered"  # 2xx (a GitHub deployment exists)
        TRANSIENT = "transient"  # not acted on, a retry may help: refused, 429, 503...
        AMBIGUOUS = (
            "ambiguous"  # may have been acted on: timeout, connection dropped, 5xx
        )
        REJECTED = "rejected"  # a permanent refusal (4xx): the job fails
        LOST = "lost"  # no outcome within the lease: the worker was lost mid-attempt

    # No index of its own: ``deployments_attempt_job_number_uniq`` leads with it.
    job = models.ForeignKey(
        Job, on_delete=models.PROTECT, related_name="trigger_attempts", db_index=False
    )
    number = models.PositiveIntegerField()
    executor = models.CharField(max_length=32)
    target_name = models.CharField(max_length=64, blank=True, default="")
    # What was called (no credentials): the receiver's URL, GitHub's API URL.
    url = models.CharField(max_length=500, blank=True, default="")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16, choices=Outcome.choices, default=Outcome.STARTED
    )
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error_class = models.CharField(max_length=100, blank=True, default="")
    # A short reason, never a response body.
    error = models.CharField(max_length=500, blank=True, default="")
    duration_seconds = models.FloatField(null=True, blank=True)
    retry_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=255, blank=True, default="")
    # What a delivered attempt started downstream (``deployments.downstream``), as its
    # answer said; null for any other outcome, and for a 2xx that named nothing.
    downstream = models.JSONField(null=True, blank=True, default=None)
    log_ticket = log_ticket_field()

    objects = TriggerAttemptQuerySet.as_manager()

    class Meta:
        indexes = [*log_ticket_indexes("deployments_trig")]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "number"], name="deployments_attempt_job_number_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError("TriggerAttempt rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("TriggerAttempt rows are append-only")
