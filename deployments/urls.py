from django.urls import path

from . import apis

urlpatterns = [
    path("deployments/", apis.DeploymentCollectionApi.as_view(), name="deployments"),
    path(
        "deployments/<str:deployment_id>/",
        apis.DeploymentDetailApi.as_view(),
        name="deployment-detail",
    ),
    path("builds/", apis.BuildCollectionApi.as_view(), name="builds"),
    path("builds/<str:build_id>/", apis.BuildDetailApi.as_view(), name="build-detail"),
    path("status-sync/", apis.StatusSyncApi.as_view(), name="status-sync"),
]
