import secrets

from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.models import ApiClient, BaseModel, log_ticket_field, log_ticket_indexes


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


TERMINAL_JOB_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED})

# The longest ``detail`` a status report may carry (docs/http-api.md, "Status sync"); GitHub's
# deployment status descriptions are cut to the same length.
REPORTED_DETAIL_MAX_LENGTH = 1000


def public_id_generate(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class Job(BaseModel):
    """What deployments and builds share: the triggering client and key, the status lifecycle
    driven by the worker (and by external reports), and the executor guard.

    ``executor_started_at`` is set in the committed transition that claims the job, before the
    executor runs: a job with it set is never handed to an executor again."""

    public_id_prefix = ""
    # The request fields of its kind beyond those every job has (``services.job_new``).
    request_fields: tuple[str, ...] = ()

    public_id = models.CharField(max_length=32, editable=False)
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
    # When a run message was last published for the job; null while it waits for its first
    # (the relay's claim, through the partial "outbox" index).
    last_dispatched_at = models.DateTimeField(null=True, blank=True)
    executor_started_at = models.DateTimeField(null=True, blank=True)
    executor_finished_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=255, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    detail = models.TextField(blank=True, default="")
    log_ticket = log_ticket_field()

    # Declared on the abstract model, so that code written for any kind of job can query it.
    objects = models.Manager()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.public_id

    def save(self, *args, **kwargs):
        if not self.public_id:
            self.public_id = public_id_generate(self.public_id_prefix)
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        raise NotImplementedError


class Deployment(Job):
    public_id_prefix = "dep"
    request_fields = ("environment",)

    environment = models.CharField(max_length=64)
    # The highest GitHub deployment_status id applied; lower or equal ids are out of order.
    last_github_status_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
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
            # A client's list, newest first, reads its own rows only (no walk over other
            # clients' newer rows), on every page.
            models.Index(fields=["client", "id"], name="deployments_dep_client_id_idx"),
            models.Index(
                fields=["status", "last_dispatched_at"],
                name="deployments_dep_sweep_idx",
                condition=Q(status__in=["queued", "running"]),
            ),
            models.Index(
                fields=["id"],
                name="deployments_dep_outbox_idx",
                condition=Q(status="queued", last_dispatched_at__isnull=True),
            ),
            models.Index(
                fields=["repository", "environment", "-id"],
                name="deployments_dep_github_idx",
            ),
            models.Index(
                fields=["status", "-created_at"], name="deployments_dep_status_idx"
            ),
            *log_ticket_indexes("deployments_dep"),
        ]

    def get_absolute_url(self) -> str:
        return f"/api/deployments/{self.public_id}/"


class Build(Job):
    public_id_prefix = "bld"
    request_fields = ("ref",)

    ref = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["public_id"], name="deployments_build_public_id_uniq"
            ),
        ]
        indexes = [
            models.Index(
                fields=["client", "idempotency_key"],
                name="deployments_bld_client_key_idx",
            ),
            # A client's list, newest first, reads its own rows only (no walk over other
            # clients' newer rows), on every page.
            models.Index(fields=["client", "id"], name="deployments_bld_client_id_idx"),
            models.Index(
                fields=["status", "last_dispatched_at"],
                name="deployments_bld_sweep_idx",
                condition=Q(status__in=["queued", "running"]),
            ),
            models.Index(
                fields=["id"],
                name="deployments_bld_outbox_idx",
                condition=Q(status="queued", last_dispatched_at__isnull=True),
            ),
            models.Index(
                fields=["status", "-created_at"], name="deployments_bld_status_idx"
            ),
            *log_ticket_indexes("deployments_bld"),
        ]

    def get_absolute_url(self) -> str:
        return f"/api/builds/{self.public_id}/"


class JobTransition(models.Model):
    """One status change of a deployment or build (append-only): from, to, when, by whom."""

    deployment = models.ForeignKey(
        Deployment,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="transitions",
    )
    build = models.ForeignKey(
        Build,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="transitions",
    )
    from_status = models.CharField(max_length=16, choices=JobStatus.choices)
    to_status = models.CharField(max_length=16, choices=JobStatus.choices)
    at = models.DateTimeField(default=timezone.now)
    # worker:<hostname>/<pid>, sweep, status-sync:<client>, github:<delivery>
    actor = models.CharField(max_length=255)
    detail = models.TextField(blank=True, default="")
    recorded_at = models.DateTimeField(default=timezone.now)
    log_ticket = log_ticket_field()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(deployment__isnull=False, build__isnull=True)
                | Q(deployment__isnull=True, build__isnull=False),
                name="deployments_transition_one_target",
            ),
        ]
        indexes = [*log_ticket_indexes("deployments_trans")]

    def __str__(self) -> str:
        return f"{self.from_status} -> {self.to_status}"


class StatusSync(BaseModel):
    """An external report of a deployment's or build's status, with whether it applied."""

    public_id = models.CharField(max_length=32, editable=False)
    client = models.ForeignKey(ApiClient, on_delete=models.PROTECT, related_name="+")
    deployment = models.ForeignKey(
        Deployment,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="status_syncs",
    )
    build = models.ForeignKey(
        Build,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="status_syncs",
    )
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
            models.CheckConstraint(
                condition=Q(deployment__isnull=False, build__isnull=True)
                | Q(deployment__isnull=True, build__isnull=False),
                name="deployments_statussync_one_target",
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
