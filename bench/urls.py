from django.urls import path

from . import views

urlpatterns = [
    path("bare", views.bare),
    path("insert", views.raw_insert),
    path("insert-notify", views.raw_insert_notify),
]
