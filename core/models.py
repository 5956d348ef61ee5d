import hashlib
import secrets
from datetime import timedelta

from django.db import models
from django.utils import timezone


class AppendOnlyError(Exception):
    """A ledger row was about to be changed or deleted."""


class AppendOnlyQuerySet(models.QuerySet):
    """Bulk ``update()`` and ``delete()`` refuse on a ledger, as ``save`` and ``delete`` do."""

    def update(self, **kwargs):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only")

    def delete(self):
        raise AppendOnlyError(f"{self.model.__name__} rows are append-only")


class AppendOnlyManager(models.Manager.from_queryset(AppendOnlyQuerySet)):  # type: ignore[misc]
    pass


class AppendOnlyModel(models.Model):
    """A ledger row is written once: ``save`` of an existing row, ``delete``, and bulk
    ``update()``/``delete()`` through the ORM refuse. (The database itself is the audit
    trail's business: ``audit_verify`` detects what raw SQL changed.)"""

    objects = AppendOnlyManager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AppendOnlyError(f"{type(self).__name__} rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{type(self).__name__} rows are append-only")


class BaseModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


def token_hash(token: str) -> str:
    """Tokens are 256-bit random strings, so one SHA-256 is enough to store them safely
    (a slow password hash would cost every API request and add nothing)."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_generate() -> str:
    return secrets.token_urlsafe(32)


class ApiClient(BaseModel):
    """A caller of the /api/ endpoints (a CI system, an internal tool). Its token is stored hashed;
    only its first characters are kept to tell tokens apart."""

    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, editable=False)
    token_prefix = models.CharField(max_length=8, editable=False)
    is_active = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name"], name="core_apiclient_name_uniq"),
            models.UniqueConstraint(
                fields=["token_hash"], name="core_apiclient_token_hash_uniq"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    # DRF's IsAuthenticated asks the authenticated principal this.
    @property
    def is_authenticated(self) -> bool:
        return True


class WorkerHeartbeat(models.Model):
    """Written by the worker when asked to (``worker_ping``): proof that a task went from the
    broker through a worker process into the database."""

    token = models.CharField(max_length=64)
    hostname = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["token"], name="core_workerheartbeat_token_uniq"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.hostname} {self.created_at:%Y-%m-%d %H:%M:%S}"


class RelayHeartbeat(models.Model):
    """One outbox relay (a thread of a worker process), as it last reported itself: how
    ``/metrics`` and ``/readyz`` tell how many relays are alive."""

    relay_id = models.CharField(max_length=255)
    started_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()
    published = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["relay_id"], name="core_relayheartbeat_relay_uniq"
            ),
        ]

    def __str__(self) -> str:
        return self.relay_id

    # A relay silent for this long is gone (its process ended): its row is dropped, so that
    # worker restarts do not pile rows up.
    FORGET_AFTER = timedelta(days=1)

    @classmethod
    def beat(cls, *, relay_id: str, published: int) -> None:
        now = timezone.now()
        cls.objects.update_or_create(
            relay_id=relay_id, defaults={"last_seen_at": now, "published": published}
        )
        cls.objects.filter(last_seen_at__lt=now - cls.FORGET_AFTER).delete()
