from django.urls import path

from .apis import InboxEventDetailApi

urlpatterns = [
    path(
        "webhooks/<str:slug>/events/<path:event_id>/",
        InboxEventDetailApi.as_view(),
        name="webhooks-event-detail",
    ),
]
