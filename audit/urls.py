from django.urls import path

from . import views

app_name = "audit"

urlpatterns = [
    path("checkpoint", views.checkpoint, name="checkpoint"),
    path("public-key", views.public_key, name="public-key"),
    path("proof/inclusion", views.inclusion_proof, name="proof-inclusion"),
    path("proof/consistency", views.consistency_proof, name="proof-consistency"),
]
