from typing import Any

from django.apps import AppConfig


def _purge_logged(
    sender: Any, instance: Any, created: bool = False, **kwargs: Any
) -> None:
    """A purge's operator action (inbox bodies, evidence bodies) enters the log with the
    bodies it drops, in the purge's transaction (``audit.sealer.body_purges_log``); a
    retention drop of a day of the inbox with what it held (``partition_drop_log``)."""
    if created and instance.action in ("purge_bodies", "purge_evidence_bodies"):
        from .sealer import body_purges_log

        body_purges_log(action=instance)
    elif created and instance.action == "drop_inbox_partition":
        from .sealer import partition_drop_log

        partition_drop_log(action=instance)


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.models.signals import post_save

        from core.periodic import periodic_task_register
        from trail.models import OperatorAction

        from .admin_hooks import admin_hooks_register

        periodic_task_register(
            name="audit-seal",
            task="audit.seal_inbox",
            every_seconds=settings.AUDIT_SEAL_INTERVAL_SECONDS,
        )
        periodic_task_register(
            name="dashboard-figures",
            task="audit.inbox_figures",
            every_seconds=settings.DASHBOARD_FIGURES_INTERVAL_SECONDS,
        )
        post_save.connect(
            _purge_logged,
            sender=OperatorAction,
            dispatch_uid="audit.purge_logged",
            weak=False,
        )
        admin_hooks_register()
