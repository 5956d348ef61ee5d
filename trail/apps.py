from django.apps import AppConfig


class TrailConfig(AppConfig):
    name = "trail"
    verbose_name = "Trail"
