"""Deployments and builds, as rows and as the bodies an API client posts, and the one way the
tests post with an ``Idempotency-Key``."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import factory
from django.utils import timezone

from deployments.models import Build, Deployment
from tests.core.factories import api_client_make


def deployment_body(**overrides: Any) -> dict[str, Any]:
    """A valid ``POST /api/deployments/`` body; ``overrides`` replace its members."""
    body = {
        "repository": "acme/payment-service",
        "commit_sha": "abc123def456",
        "environment": "staging",
        "workflow": "deploy.yml",
        "triggered_by": "github-actions",
    }
    body.update(overrides)
    return body


def build_body(**overrides: Any) -> dict[str, Any]:
    """A valid ``POST /api/builds/`` body; ``overrides`` replace its members."""
    body = {
        "repository": "acme/payment-service",
        "commit_sha": "abc123def456",
        "ref": "refs/heads/main",
        "workflow": "build.yml",
        "triggered_by": "github-actions",
    }
    body.update(overrides)
    return body


def idempotent_post(http, url: str, body: Any, key: str | None = "key-1", **headers):
    """``body`` as JSON with ``Idempotency-Key: key`` (no header when ``key`` is None)."""
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    return http.post(
        url, data=json.dumps(body), content_type="application/json", **headers
    )


def retry_come_due(job: Deployment | Build) -> None:
    """The job's waiting trigger retry as it stands once the clock reaches its time: its
    ``next_attempt_at`` moved back to now, without the wait (the claim and the run decide
    due against the time they run at; the closed attempt keeps the ``retry_at`` it
    recorded)."""
    type(job).objects.filter(pk=job.pk, next_attempt_at__isnull=False).update(
        next_attempt_at=timezone.now()
    )


def lease_ended(job: Deployment | Build) -> None:
    """The job's lease as it stands once its time has passed: moved to just before now
    rather than waited out (the sweep and the run decide against the time they run at)."""
    type(job).objects.filter(pk=job.pk).update(
        lease_expires_at=timezone.now() - timedelta(milliseconds=1)
    )


class JobFactory(factory.django.DjangoModelFactory):
    """A queued job of its own new API client, as its creation leaves it."""

    class Meta:
        abstract = True

    client = factory.LazyFunction(lambda: api_client_make()[0])
    repository = "acme/x"
    commit_sha = "abcdef1"


class DeploymentFactory(JobFactory):
    class Meta:
        model = Deployment

    idempotency_key = "k"
    environment = "staging"


class BuildFactory(JobFactory):
    class Meta:
        model = Build

    idempotency_key = "b"
