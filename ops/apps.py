from django.apps import AppConfig


class OpsConfig(AppConfig):
    """The operator API (docs/http-api.md, "Operator API"): every console action over HTTP,
    through the same services as the admin and the commands. It holds no tables."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "ops"
    verbose_name = "Operator API"
