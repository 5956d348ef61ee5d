from django.conf import settings
from django.contrib import admin
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from core import views as core_views
from core.apis import WhoAmIApi

handler404 = "core.views.not_found"

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("readyz", core_views.readyz, name="readyz"),
    path("metrics", core_views.metrics, name="metrics"),
    # Operator actions moved from the inbox's app to the trail's: the old addresses lead
    # to the new ones (docs/runbook.md).
    re_path(
        r"^admin/webhooks/operatoraction/(?P<rest>.*)$",
        RedirectView.as_view(
            url="/admin/trail/operatoraction/%(rest)s",
            query_string=True,
            permanent=True,
        ),
    ),
    path("admin/", admin.site.urls),
    # The verifiable log's checkpoint, verifier key and proofs: public (no login).
    path("audit/", include("audit.urls")),
    path("webhooks/", include("webhooks.urls")),
    path("api/whoami/", WhoAmIApi.as_view(), name="whoami"),
    path("api/", include("webhooks.api_urls")),
    path("api/", include("research.urls")),
    path("api/", include("deployments.urls")),
    path("api/", include("idempotency.urls")),
    path("api/ops/", include("ops.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"
    ),
]

if settings.BENCH_ENDPOINTS:
    # Floor endpoints for `make bench` (config.settings.bench); production refuses them.
    urlpatterns += [path("_bench/", include("bench.urls"))]
