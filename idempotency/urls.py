from django.urls import path

from .apis import IdempotencyKeyDetailApi

urlpatterns = [
    # <path:> so that a key holding "/" (sent percent-encoded or not) still resolves.
    path(
        "idempotency-keys/<str:operation_type>/<path:key>/",
        IdempotencyKeyDetailApi.as_view(),
        name="idempotency-key-detail",
    ),
]
