from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    verbose_name = "Deployments and builds"

    def ready(self) -> None:
        from django.conf import settings

        from core.periodic import periodic_task_register

        # In the same rhythm as the inbox's sweep: a lost message costs a job the same delay.
        periodic_task_register(
            name="deployment-jobs-sweep",
            task="deployments.sweep",
            every_seconds=settings.INBOX_SWEEP_INTERVAL_SECONDS,
        )
