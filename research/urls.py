from django.urls import path

from .apis import DocumentDetailApi, DocumentListApi, DocumentRevisionListApi

urlpatterns = [
    path(
        "research/documents/",
        DocumentListApi.as_view(),
        name="research-document-list",
    ),
    path(
        "research/documents/<str:entity_id>/",
        DocumentDetailApi.as_view(),
        name="research-document-detail",
    ),
    path(
        "research/documents/<str:entity_id>/revisions/",
        DocumentRevisionListApi.as_view(),
        name="research-document-revisions",
    ),
]
