"""The audit console's view of the inbox: events, the dead-letter queue, fingerprint mismatches,
sources, signature failures, operator actions and bulk replay jobs. Read-only everywhere; the
only writes are actions (replay, mark investigated, rotate a secret, start a bulk replay),
which call services and are recorded as operator actions. No secret is ever shown."""

from core.admin.status import status_words_register

from . import inbox, mismatches, operations, sources  # noqa: F401 - registers the admins

# The words and tone of the inbox's statuses, on every page of the console (docs/console.md,
# "One wording"): an event's processing status, an attempt's outcome, a bulk replay job's
# state and a source's.
status_words_register(
    {
        # An inbox event (``ProcessingStatus``), and one its paused source holds
        # (docs/subsystems/relay.md, "Pausing a source").
        "received": ("Received", "waiting"),
        "processing": ("Processing", "running"),
        "processed": ("Processed", "ok"),
        "ignored_out_of_order": ("Ignored (out of order)", "ignored"),
        "ignored_duplicate_version": ("Ignored (duplicate version)", "ignored"),
        "ignored_unsupported": ("Ignored (unsupported)", "ignored"),
        "failed": ("Failed", "error"),
        "dead_lettered": ("Dead-lettered", "error"),
        "held": ("Held (paused)", "warning"),
        # An inbox attempt's outcome (``InboxAttempt.Outcome``).
        "started": ("Started", "running"),
        "succeeded": ("Succeeded", "ok"),
        "ignored": ("Ignored", "ignored"),
        "retry": ("Retry", "warning"),
        # A bulk replay job's state (``BulkReplayJob.State``).
        "counted": ("Counted, not started", "waiting"),
        "queued": ("Queued", "waiting"),
        "running": ("Running", "running"),
        "cancelled": ("Cancelled", "ignored"),
        # A source's state.
        "enabled": ("Enabled", "ok"),
        "disabled": ("Disabled", "error"),
        "paused": ("Paused", "warning"),
        "draining": ("Draining", "running"),
    }
)
