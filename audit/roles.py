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
    "demo.switch_dependency",  # the demo's rehearsal: a dependency down, then back up
)


def _permissions(wanted: list[tuple[str, str]]) -> dict[tuple[str, str], Permission]:
    """The permissions named by (app label, codename) that exist, read in one query. When
    one is missing, the audited apps' content types and permissions are created first (they
    are created after ``migrate``; models added since get theirs here)."""

    def read() -> dict[tuple[str, str], Permission]:
        return {
            (p.content_type.app_label, p.codename): p
            for p in Permission.objects.select_related("content_type").filter(
                content_type__app_label__in={label for label, _ in wanted},
                codename__in={codename for _, codename in wanted},
            )
        }

    found = read()
    if all(key in found for key in wanted):
        return found
    for app_label in audited_app_labels():
        config = apps.get_app_config(app_label)
        create_contenttypes(config, verbosity=0)
        create_permissions(config, verbosity=0)
    return read()


def view_permissions() -> list[Permission]:
    """Every ``view_*`` permission of the audited apps' installed models (proxies included)."""
    wanted = [
        (config.label, f"view_{model._meta.model_name}")
        for config in map(apps.get_app_config, audited_app_labels())
        for model in config.get_models()
    ]
    found = _permissions(wanted)
    return [found[key] for key in wanted if key in found]


def _operator_extra_permissions() -> list[Permission]:
    wanted = [
        (app_label, codename)
        for app_label, codename in (p.split(".", 1) for p in OPERATOR_EXTRA_PERMISSIONS)
    ]
    found = _permissions(wanted)
    missing = [".".join(key) for key in wanted if key not in found]
    if missing:
        raise Permission.DoesNotExist(f"no permission {', '.join(missing)}")
    return [found[key] for key in wanted]


@transaction.atomic
def roles_bootstrap() -> dict[str, int]:
    """Creates or updates the groups; idempotent. Each group gets exactly its permissions
    (anything else granted to it by hand is removed)."""
    views = view_permissions()
    auditors, _ = Group.objects.get_or_create(name=AUDITORS)
    auditors.permissions.set(views)
    operators, _ = Group.objects.get_or_create(name=OPERATORS)
    operators.permissions.set(views + _operator_extra_permissions())
    return {
        AUDITORS: auditors.permissions.count(),
        OPERATORS: operators.permissions.count(),
    }
