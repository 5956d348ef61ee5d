"""The two roles of the audit console, computed from the installed models."""

from __future__ import annotations

from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.management import create_contenttypes
from django.db import transaction

OPERATORS = "Operators"
AUDITORS = "Auditors"


def audited_app_labels() -> list[str]:
    """The product's own apps (the packages at the top of this repository), whose every
    model an auditor may view: an app added later is audited without a change here."""
    root = Path(settings.BASE_DIR).resolve()
    return [
        config.label
        for config in apps.get_app_configs()
        if Path(config.path).resolve().parent == root
    ]


OPERATOR_EXTRA_PERMISSIONS = (
    "webhooks.replay_inboxevent",
    "webhooks.investigate_fingerprintmismatch",
    "webhooks.rotate_secret",
    "webhooks.pause_source",  # pause and resume a source (its events wait, then drain)
    "webhooks.enable_source",  # disable and enable a source (a disabled one answers 404)
    # Its admin lets them edit the expected delivery interval alone (webhooks/admin/sources.py).
    "webhooks.change_webhooksource",
    "webhooks.add_bulkreplayjob",  # a replay by filter starts as a new job with its dry-run count
    # Deploy targets: where jobs go; each create and change is an operator action.
    "deployments.add_deploytarget",
    "deployments.change_deploytarget",
    "deployments.test_deploytarget",  # "Send test trigger"
)


def _permission(dotted: str) -> Permission:
    app_label, codename = dotted.split(".", 1)
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


def view_permissions() -> list[Permission]:
    """Every ``view_*`` permission of the audited apps' installed models (proxies included)."""
    wanted = []
    for app_label in audited_app_labels():
        config = apps.get_app_config(app_label)
        # Permissions are created after migrate; make sure models added since exist too.
        create_contenttypes(config, verbosity=0)
        create_permissions(config, verbosity=0)
        for model in config.get_models():
            wanted.append((app_label, f"view_{model._meta.model_name}"))
    permissions: list[Permission] = []
    for app_label, codename in wanted:
        permissions.extend(
            Permission.objects.filter(
                content_type__app_label=app_label, codename=codename
            )
        )
    return permissions


@transaction.atomic
def roles_bootstrap() -> dict[str, int]:
    """Creates or updates the groups; idempotent. Each group gets exactly its permissions
    (anything else granted to it by hand is removed)."""
    views = view_permissions()
    auditors, _ = Group.objects.get_or_create(name=AUDITORS)
    auditors.permissions.set(views)
    operators, _ = Group.objects.get_or_create(name=OPERATORS)
    operators.permissions.set(
        views + [_permission(p) for p in OPERATOR_EXTRA_PERMISSIONS]
    )
    return {
        AUDITORS: auditors.permissions.count(),
        OPERATORS: operators.permissions.count(),
    }
