from django.urls import path

from . import views

app_name = "webhooks"
urlpatterns = [
    path("<str:slug>/", views.webhook_receive, name="receive"),
]
