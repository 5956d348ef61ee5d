"""The operator API, under /api/ops/ (docs/http-api.md, "Operator API")."""

from django.urls import path

from . import apis, key_apis, target_apis

urlpatterns = [
    path("replays/", apis.ReplayApi.as_view(), name="ops-replays"),
    path(
        "bulk-replays/", apis.BulkReplayCollectionApi.as_view(), name="ops-bulk-replays"
    ),
    path(
        "bulk-replays/<int:bulk_replay_id>/",
        apis.BulkReplayDetailApi.as_view(),
        name="ops-bulk-replay",
    ),
    path(
        "bulk-replays/<int:bulk_replay_id>/<str:control>/",
        apis.BulkReplayControlApi.as_view(),
        name="ops-bulk-replay-control",
    ),
    path("sources/", apis.SourceListApi.as_view(), name="ops-sources"),
    path("sources/<slug:slug>/", apis.SourceDetailApi.as_view(), name="ops-source"),
    path(
        "sources/<slug:slug>/pause/",
        apis.SourcePauseApi.as_view(),
        name="ops-source-pause",
    ),
    path(
        "sources/<slug:slug>/resume/",
        apis.SourceResumeApi.as_view(),
        name="ops-source-resume",
    ),
    path(
        "sources/<slug:slug>/rotate/",
        apis.SourceRotateApi.as_view(),
        name="ops-source-rotate",
    ),
    path(
        "sources/<slug:slug>/revoke-previous/",
        apis.SourceRevokePreviousApi.as_view(),
        name="ops-source-revoke-previous",
    ),
    path("mismatches/", apis.MismatchListApi.as_view(), name="ops-mismatches"),
    path(
        "mismatches/<int:mismatch_id>/",
        apis.MismatchDetailApi.as_view(),
        name="ops-mismatch",
    ),
    path(
        "mismatches/<int:mismatch_id>/investigate/",
        apis.MismatchInvestigateApi.as_view(),
        name="ops-mismatch-investigate",
    ),
    path("dead-letters/", apis.DeadLetterListApi.as_view(), name="ops-dead-letters"),
    path(
        "deploy-targets/",
        target_apis.DeployTargetCollectionApi.as_view(),
        name="ops-deploy-targets",
    ),
    path(
        "deploy-targets/<int:target_id>/",
        target_apis.DeployTargetDetailApi.as_view(),
        name="ops-deploy-target",
    ),
    path(
        "deploy-targets/<int:target_id>/disable/",
        target_apis.DeployTargetDisableApi.as_view(),
        name="ops-deploy-target-disable",
    ),
    path(
        "idempotency-keys/",
        key_apis.IdempotencyKeyLookupApi.as_view(),
        name="ops-idempotency-keys",
    ),
    path(
        "idempotency-keys/evict/",
        key_apis.IdempotencyKeyEvictApi.as_view(),
        name="ops-idempotency-key-evict",
    ),
]
