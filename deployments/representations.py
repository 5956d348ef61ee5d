"""How a deployment or build is shown: the body of ``GET /api/deployments/<id>/`` (and of
the 202 that creates it), which is also the ``data`` of the trigger an ``http`` executor sends
(docs/http-api.md, "Executors"). One definition, so that a receiver reads exactly what the
API answers."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .downstream import SYSTEMS
from .models import Build, Deployment, Job


@extend_schema_field(
    {
        "oneOf": [{"type": "string", "maxLength": 200}, {"type": "integer"}],
        "nullable": True,
        "description": "The downstream system's own id of what it started: GitHub's "
        "integer ids, a receiver's text or integer.",
    }
)
class DownstreamIdField(serializers.Field):
    """A downstream id as it was recorded: text or an integer."""

    def to_representation(self, value: Any) -> Any:
        return value


class DownstreamSerializer(serializers.Serializer):
    """What the trigger started (docs/http-api.md, "What a trigger started")."""

    system = serializers.ChoiceField(choices=sorted(SYSTEMS))
    id = DownstreamIdField(allow_null=True)
    url = serializers.URLField(allow_null=True)


class DeploymentOutputSerializer(serializers.Serializer):
    deployment_id = serializers.CharField(source="public_id")
    status = serializers.CharField()
    detail = serializers.CharField()
    idempotency_key = serializers.CharField()
    repository = serializers.CharField()
    commit_sha = serializers.CharField()
    environment = serializers.CharField()
    workflow = serializers.CharField()
    triggered_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    downstream = DownstreamSerializer(allow_null=True)


class BuildOutputSerializer(serializers.Serializer):
    build_id = serializers.CharField(source="public_id")
    status = serializers.CharField()
    detail = serializers.CharField()
    idempotency_key = serializers.CharField()
    repository = serializers.CharField()
    commit_sha = serializers.CharField()
    ref = serializers.CharField()
    workflow = serializers.CharField()
    triggered_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    downstream = DownstreamSerializer(allow_null=True)


# One instance each for the responses of new operations: a serializer's fields are built (deep
# copied) per instance, which would cost more than the rendering itself.
DEPLOYMENT_OUTPUT = DeploymentOutputSerializer()
BUILD_OUTPUT = BuildOutputSerializer()


def job_representation(job: Job) -> dict[str, Any]:
    """The job as ``GET /api/deployments/<id>/`` (or ``/api/builds/<id>/``) answers it."""
    if isinstance(job, Deployment):
        return dict(DEPLOYMENT_OUTPUT.to_representation(job))
    if isinstance(job, Build):
        return dict(BUILD_OUTPUT.to_representation(job))
    raise TypeError(f"not a job: {job!r}")
