"""The audit console's building blocks for every app's admin, and core's own admin (the worker
heartbeats; the API clients' is the trail's), which Django's autodiscovery finds here as
``core.admin``.

- ``status``: one wording and one badge per status, each app registering its own words;
- ``filters``: a status column's filter, a range of days, the calendar's ends;
- ``pagination``: counts that stay bounded on big tables, inlines a page at a time;
- ``mixins``: read-only ledgers, status fields as badges, paged inlines;
- ``render``: stored payloads, long texts and links on a record's page;
- ``actions``: the confirmation page of an action that needs a reason;
- ``diff``: two bodies side by side, bounded;
- ``evidence``: a row's entry in the verifiable log and a record's evidence bundle.

See docs/console.md, "How it shows things".
"""

from django.contrib import admin

from ..models import WorkerHeartbeat


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ("hostname", "created_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
