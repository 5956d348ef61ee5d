"""The trail of operator actions (docs/security.md, "Every change of trust is an operator
action"): who did what, when and why, for every app. It sits below the apps and above core,
so that each app, and core's API clients (``trail.api_clients``), record with one import."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.models import AppendOnlyModel, log_ticket_field, log_ticket_indexes


class OperatorAction(AppendOnlyModel):
    """Who did what to which inbox events or sources, when and why. Append-only; auditors
    browse it."""

    class Action(models.TextChoices):
        REPLAY = "replay"
        BULK_REPLAY = "bulk_replay"
        MARK_INVESTIGATED = "mark_investigated"
        ROTATE_SECRET = "rotate_secret"  # noqa: S105 - an action name
        ROTATE_PUBLIC_KEY = "rotate_public_key"
        PURGE_BODIES = "purge_bodies"
        START_BULK_REPLAY = "start_bulk_replay"
        CANCEL_BULK_REPLAY = "cancel_bulk_replay"
        RESUME_BULK_REPLAY = "resume_bulk_replay"
        PAUSE_SOURCE = "pause_source"
        RESUME_SOURCE = "resume_source"
        CREATE_SOURCE = "create_source"
        ENABLE_SOURCE = "enable_source"
        DISABLE_SOURCE = "disable_source"
        SET_EXPECTED_INTERVAL = "set_expected_interval"
        PURGE_EVIDENCE_BODIES = "purge_evidence_bodies"
        PURGE_SIGNATURE_FAILURES = "purge_signature_failures"
        CREATE_API_CLIENT = "create_api_client"
        ACTIVATE_API_CLIENT = "activate_api_client"
        DEACTIVATE_API_CLIENT = "deactivate_api_client"
        SET_SOURCE_CLIENT = "set_source_client"
        CREATE_DEPLOY_TARGET = "create_deploy_target"
        CHANGE_DEPLOY_TARGET = "change_deploy_target"
        TEST_DEPLOY_TARGET = "test_deploy_target"
        SWITCH_DEPENDENCY = "switch_dependency"
        SET_DEPLOY_TARGET_BREAKER = "set_deploy_target_breaker"
        SET_API_CLIENT_ROLE = "set_api_client_role"
        PAUSE_BULK_REPLAY = "pause_bulk_replay"
        REVOKE_PREVIOUS_SECRETS = "revoke_previous_secrets"
        EVICT_IDEMPOTENCY_KEY = "evict_idempotency_key"
        DROP_INBOX_PARTITION = "drop_inbox_partition"

    action = models.CharField(max_length=32, choices=Action.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    # The admin user's username, or "os:<login>" for a command run from a shell: kept as text so
    # the record reads the same after the user is renamed.
    actor_name = models.CharField(max_length=255)
    reason = models.TextField(blank=True, default="")
    event_ids = models.JSONField(default=list, help_text="Inbox event primary keys.")
    event_count = models.PositiveIntegerField(default=0)
    skipped_count = models.PositiveIntegerField(
        default=0, help_text="Selected rows that were not in a replayable status."
    )
    details = models.JSONField(default=dict, blank=True)
    # The bulk replay job of a chunk or a control action, by label: the trail names no
    # app's module.
    bulk_job = models.ForeignKey(
        "webhooks.BulkReplayJob",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="actions",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    log_ticket = log_ticket_field()

    class Meta:
        # The table keeps the name it had when the inbox owned the trail.
        db_table = "webhooks_operatoraction"
        indexes = [
            models.Index(fields=["-created_at"], name="webhooks_action_created_idx"),
            models.Index(
                fields=["action", "-created_at"], name="webhooks_action_kind_idx"
            ),
            *log_ticket_indexes("webhooks_action"),
        ]

    def __str__(self) -> str:
        events = f" ({self.events_words})" if self.events_words else ""
        return f"{self.action_words} by {self.actor_name}{events}"

    @property
    def action_words(self) -> str:
        return operator_action_words(self.action)

    @property
    def events_words(self) -> str:
        """How many inbox events the action was on, in words ("" for none): the events it
        names, or, for a pause and a resume, which name none, the source's events that
        waited then (``details["held_events"]``): held by the pause, released by the
        resume's drain."""
        details = self.details if isinstance(self.details, dict) else {}
        if self.action in (self.Action.PAUSE_SOURCE, self.Action.RESUME_SOURCE):
            held = details.get("held_events")
            if not isinstance(held, int):
                return ""
            more = "+" if details.get("held_events_capped") else ""
            verb = "held" if self.action == self.Action.PAUSE_SOURCE else "released"
            return f"{held}{more} {verb}"
        if not self.event_count:
            return ""
        return f"{self.event_count} event{'' if self.event_count == 1 else 's'}"


# What the console calls each operator action (docs/console.md, "One wording"): a label for
# people on every page (lists, filters, titles, the dashboard, an event's story), never the
# code, which the API, the log and the details keep.
OPERATOR_ACTION_WORDS: dict[str, str] = {
    OperatorAction.Action.REPLAY: "Replay",
    OperatorAction.Action.BULK_REPLAY: "Bulk replay (a chunk)",
    OperatorAction.Action.MARK_INVESTIGATED: "Mark investigated",
    OperatorAction.Action.ROTATE_SECRET: "Rotate secret",
    OperatorAction.Action.ROTATE_PUBLIC_KEY: "Rotate public key",
    OperatorAction.Action.PURGE_BODIES: "Purge raw bodies",
    OperatorAction.Action.START_BULK_REPLAY: "Start bulk replay",
    OperatorAction.Action.CANCEL_BULK_REPLAY: "Cancel bulk replay",
    OperatorAction.Action.RESUME_BULK_REPLAY: "Resume bulk replay",
    OperatorAction.Action.PAUSE_SOURCE: "Pause source",
    OperatorAction.Action.RESUME_SOURCE: "Resume source",
    OperatorAction.Action.CREATE_SOURCE: "Create source",
    OperatorAction.Action.ENABLE_SOURCE: "Enable source",
    OperatorAction.Action.DISABLE_SOURCE: "Disable source",
    OperatorAction.Action.SET_EXPECTED_INTERVAL: "Set expected delivery interval",
    OperatorAction.Action.PURGE_EVIDENCE_BODIES: "Purge evidence bodies",
    OperatorAction.Action.PURGE_SIGNATURE_FAILURES: "Purge signature failures",
    OperatorAction.Action.CREATE_API_CLIENT: "Create API client",
    OperatorAction.Action.ACTIVATE_API_CLIENT: "Activate API client",
    OperatorAction.Action.DEACTIVATE_API_CLIENT: "Deactivate API client",
    OperatorAction.Action.SET_SOURCE_CLIENT: "Set source's API client",
    OperatorAction.Action.CREATE_DEPLOY_TARGET: "Create deploy target",
    OperatorAction.Action.CHANGE_DEPLOY_TARGET: "Change deploy target",
    OperatorAction.Action.TEST_DEPLOY_TARGET: "Send test trigger",
    OperatorAction.Action.SWITCH_DEPENDENCY: "Switch a demo dependency",
    OperatorAction.Action.SET_DEPLOY_TARGET_BREAKER: "Move a deploy target's breaker",
    OperatorAction.Action.SET_API_CLIENT_ROLE: "Set API client's role",
    OperatorAction.Action.PAUSE_BULK_REPLAY: "Pause bulk replay",
    OperatorAction.Action.REVOKE_PREVIOUS_SECRETS: "Revoke previous secrets",
    OperatorAction.Action.EVICT_IDEMPOTENCY_KEY: "Evict idempotency key",
    OperatorAction.Action.DROP_INBOX_PARTITION: "Drop a day of the inbox (retention)",
}


def operator_action_words(action: str) -> str:
    """The words the console shows for the operator action ``action``."""
    return OPERATOR_ACTION_WORDS.get(action, action.replace("_", " ").capitalize())
