"""The audit console's view of the inbox: events, the dead-letter queue, fingerprint mismatches,
sources, signature failures, operator actions and bulk replay jobs. Read-only everywhere; the
only writes are actions (replay, mark investigated, rotate a secret, start a bulk replay),
which call services and are recorded as operator actions. No secret is ever shown."""

from . import inbox, mismatches, operations, sources  # noqa: F401 - registers the admins
