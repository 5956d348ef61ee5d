from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    verbose_name = "Deployments and builds"

    def ready(self) -> None:
        from core.metrics import scrape_collector_register
        from core.relay.outbox import outbox_register

        from . import metrics  # every series at zero in every process
        from .executors import executor_settings_check
        from .outbox import JOBS_OUTBOX

        # Every process refuses to start with a DEPLOY_EXECUTOR it cannot run (unknown, or
        # http without its URL and secret), rather than failing each job later.
        executor_settings_check()
        # New jobs reach the workers through the relay; its sweep re-publishes lost ones
        # and fails jobs whose lease ran out.
        outbox_register(JOBS_OUTBOX)
        # Each target's breaker, read at scrape time (the alert DeployTargetBreakerOpen).
        scrape_collector_register(metrics.TargetBreakerCollector())
        # The trigger metrics are written by the worker that makes an attempt, but every
        # process exports their series from the start (deployments/metrics.py): the web, which
        # imports none of the attempts' code, too, so that the alerts' rates see a first
        # failure (docs/operations.md, "Metrics").
