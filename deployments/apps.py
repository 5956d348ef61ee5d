from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    verbose_name = "Deployments and builds"

    def ready(self) -> None:
        from core.relay import outbox_register

        from .outbox import JOBS_OUTBOX

        # New jobs reach the workers through the relay; its sweep re-publishes lost ones
        # and fails jobs whose lease ran out.
        outbox_register(JOBS_OUTBOX)
