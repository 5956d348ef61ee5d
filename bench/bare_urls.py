"""The URLs of the bare floor (``bench.bare_wsgi``): the raw inserts, and a health answer for
the harness to wait on."""

from django.urls import path

from . import views

urlpatterns = [
    path("healthz", views.bare),
    path("_bench/bare-insert", views.bare_insert),
    path("_bench/bare-insert-wide", views.bare_insert_wide),
    path("_bench/bare-insert-hmac", views.bare_insert_hmac),
]
