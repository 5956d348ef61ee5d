from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit"

    def ready(self) -> None:
        from django.conf import settings

        from core.periodic import periodic_task_register

        periodic_task_register(
            name="audit-seal",
            task="audit.seal_inbox",
            every_seconds=settings.AUDIT_SEAL_INTERVAL_SECONDS,
        )
