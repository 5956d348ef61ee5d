"""The admin app with the audit console's site as its default (``admin.site``): every app's
``@admin.register`` goes on ``core.admin_site.AuditAdminSite``."""

from django.contrib.admin.apps import AdminConfig


class AuditAdminConfig(AdminConfig):
    default_site = "core.admin_site.AuditAdminSite"
