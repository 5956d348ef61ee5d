"""``audit_verify`` over the verifiable log (docs/security.md, "What audit_verify names"): the
whole log against the rows and bodies of every ledger, in one pass over the log's leaves.

- The log itself: the tree recomputed from its leaves' text (``audit.log.TreeRebuild``), every
  stored node compared, the latest checkpoint's signature and root, and each kept checkpoint
  (``--since``): the log must extend it, which a consistency proof from the stored tree shows
  too. A log cut short and sealed again, or rewritten under a checkpoint, is named.
- Each entry against its record: rebuilt from the row as it is now, it must be the leaf, byte
  for byte (ALTERED, with the fields that changed; DELETED when the row is gone). Bodies are
  checked against the payload hash their entry holds; a missing body only passes with a
  ``body_purge`` entry of the log, itself checked against the row's stamp and the purge's
  operator action. An entry logged long after entries newer than it is LATE
  (``AUDIT_SEAL_LOOKBACK_SECONDS``): a row inserted behind the product's back with an old time.
- Every ledger against the log: each row that was due at the last sealing round (ready, older
  than ``AUDIT_SEAL_HORIZON_SECONDS`` plus one ``AUDIT_SEAL_INTERVAL_SECONDS``) and is not in
  the log is NOT LOGGED.
- A job's status, which is state and not a ledger, must be the one its transitions end at
  (``queued`` with none), and each transition must start where the previous one ended:
  UNEXPLAINED otherwise.
- The retired HMAC chain must still end at the head its retirement entry recorded.

Each problem is one line, starting with what it is (LOG, TRUNCATED, REWRITTEN, ALTERED,
DELETED, LATE, NOT LOGGED, UNEXPLAINED)."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import (
    BinaryField,
    Case,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
    Window,
)
from django.db.models.functions import Coalesce, Lag, Length
from django.utils import timezone

from deployments.models import Build, Deployment, JobTransition
from trail.models import OperatorAction
from webhooks.retention import purge_stamp

from . import merkle, note
from .checkpoints import checkpoint_latest, log_signer
from .leaves import LeafError, leaf_decode, leaf_encode
from .ledgers import (
    BODY_PURGE,
    CHAIN_RETIRED,
    EVIDENCE_PURGE,
    LEDGERS,
    PARTITION_DROP,
    Ledger,
    scanned_ledgers,
)
from .log import TreeRebuild, log_consistency_proof, log_leaf_chunks, log_size
from .models import AuditSeal, LogLeaf
from .sealer import PURGES, purged_ids, unlogged
from .services import INLINE_BODY_BYTES, body_groups

__all__ = ["KeptCheckpoint", "LogVerifyReport", "log_verify"]

# Rows named per kind of problem and ledger, at most (the count is always given).
_NAMED = 1000
# Kinds whose rows carry a body, and the leaf field that holds its SHA-256.
_BODY_FIELDS = {
    "inbox_event": "payload_hash",
    "fingerprint_mismatch": "conflicting_payload_hash",
}
# The log kind of the purges that may excuse a missing body of each of those kinds.
_PURGE_OF = {"inbox_event": BODY_PURGE, "fingerprint_mismatch": EVIDENCE_PURGE}


@dataclass(frozen=True)
class KeptCheckpoint:
    """A checkpoint kept outside the database (a file, a witness's copy), and what to call it
    in messages."""

    label: str
    note: str


@dataclass
class LogVerifyReport:
    size: int = 0
    checked: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    checkpoint_size: int | None = None
    # Entries whose row left with a day of the inbox that retention dropped, as the log
    # recorded (not problems).
    dropped: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, what: str, line: str) -> None:
        self.counts[what] += 1
        self.problems.append(f"{what} {line}")

    @property
    def entries_checked(self) -> int:
        return sum(self.checked.values())


def _name(ledger: Ledger | None, kind: str, record_id: int, index: int | None) -> str:
    title = ledger.title if ledger is not None else kind.replace("_", " ")
    where = f" (log index {index})" if index is not None else ""
    return f"{title} {record_id}{where}"


def _decoded(text: str) -> dict[str, Any] | None:
    try:
        return leaf_decode(text)
    except LeafError:
        return None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


@dataclass
class _PartitionDrops:
    """The ``inbox_partition_drop`` entries of the log: each names a day of the inbox that
    retention dropped (its received times, its events' id range), so that the entries of
    the rows it took are not DELETED (docs/security.md, "What the log holds")."""

    entries: list[tuple[int, int, dict[str, Any]]]  # (log index, action id, fields)

    @classmethod
    def read(cls) -> _PartitionDrops:
        found = []
        for index, record_id, text in (
            LogLeaf.objects.filter(kind=PARTITION_DROP)
            .order_by("index")
            .values_list("index", "record_id", "leaf")
        ):
            fields = _decoded(text)
            if fields is not None:
                found.append((index, record_id, fields))
        return cls(found)

    def left(self, kind: str, stored: Mapping[str, Any] | None) -> bool | int | None:
        """Whether a row whose entry is ``stored`` left with a dropped day: ``True`` for an
        event received within one; for an attempt whose event's id is in one's range, that
        event's id (it left only if that event is gone too); else ``None``."""
        if not self.entries or stored is None:
            return None
        if kind == "inbox_event":
            at = _time(stored.get("received_at"))
            if at is None:
                return None
            for _, _, fields in self.entries:
                start, end = _time(fields.get("start")), _time(fields.get("end"))
                if end is not None and at < end and (start is None or at >= start):
                    return True
            return None
        if kind == "inbox_attempt":
            event = stored.get("inbox_event_id")
            if not isinstance(event, int):
                return None
            for _, _, fields in self.entries:
                first, last = fields.get("first_event_id"), fields.get("last_event_id")
                if (
                    isinstance(first, int)
                    and isinstance(last, int)
                    and first <= event <= last
                ):
                    return event
        return None

    def check(self) -> list[str]:
        """Each entry against its operator action: a ``drop_inbox_partition`` action with
        the same details, or the entry is not one the product wrote."""
        if not self.entries:
            return []
        actions = dict(
            OperatorAction.objects.filter(
                pk__in=[r for _, r, _ in self.entries],
                action=OperatorAction.Action.DROP_INBOX_PARTITION,
            ).values_list("pk", "details")
        )
        problems = []
        for index, record_id, fields in self.entries:
            # The leaf's own members (its kind and id) and the action's id beside the
            # details the action holds.
            details = {
                k: v
                for k, v in fields.items()
                if k not in ("operator_action_id", "kind", "id")
            }
            if (
                fields.get("operator_action_id") != record_id
                or actions.get(record_id) != details
            ):
                problems.append(
                    f"inbox partition drop {record_id} (log index {index}): no "
                    "drop_inbox_partition operator action with these details"
                )
        return problems


class _Entries:
    """The checks of each entry against its record, fed chunk by chunk in index order."""

    def __init__(self, report: LogVerifyReport) -> None:
        self.report = report
        self.late_after = timedelta(seconds=settings.AUDIT_SEAL_LOOKBACK_SECONDS)
        self.newest: dict[str, tuple[datetime, int]] = {}
        self.large: dict[tuple[str, int], tuple[int, int, str]] = {}
        # (kind, row id) -> (entry index, purge stamp), and (purge kind, row id) -> entry.
        self.missing: dict[tuple[str, int], tuple[int, datetime]] = {}
        self.purges: dict[tuple[str, int], tuple[int, dict[str, Any]]] = {}
        self.retirement: tuple[int, int, dict[str, Any]] | None = None
        # The days of the inbox retention dropped, read from the log before the pass (their
        # entries come after those of the rows they name); checked against their operator
        # actions in ``finish``.
        self.drops = _PartitionDrops.read()

    def feed(self, chunk: Sequence[tuple[int, str, int, str]]) -> None:
        by_kind: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
        for index, kind, record_id, text in chunk:
            by_kind[kind].append((index, record_id, text))
        for kind, entries in by_kind.items():
            self.report.checked[kind] = self.report.checked.get(kind, 0) + len(entries)
            if kind == CHAIN_RETIRED:
                for index, record_id, text in entries:
                    self.retirement = (index, record_id, _decoded(text) or {})
            elif kind == PARTITION_DROP:
                continue  # read before the pass (``_PartitionDrops``)
            elif kind in (BODY_PURGE, EVIDENCE_PURGE):
                for index, record_id, text in entries:
                    self.purges[(kind, record_id)] = (index, _decoded(text) or {})
            elif kind in LEDGERS:
                self._rows(LEDGERS[kind], entries)
            else:
                for index, record_id, _ in entries:
                    self.report.problem(
                        "LOG", f"entry {index}: {kind} {record_id} is of no known kind"
                    )

    @staticmethod
    def _with_body(ledger: Ledger, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """With the body's length, and the body itself when it is small."""
        if ledger.kind not in _BODY_FIELDS:
            return queryset
        return queryset.annotate(
            body_length=Length("raw_body"),
            small_body=Case(
                When(body_length__lte=INLINE_BODY_BYTES, then=F("raw_body")),
                default=None,
                output_field=BinaryField(),
            ),
        )

    def _rows(self, ledger: Ledger, entries: list[tuple[int, int, str]]) -> None:
        paths = ledger.columns()
        ids = [record_id for _, record_id, _ in entries]
        low, high = min(ids), max(ids)
        manager = ledger.model_class._default_manager
        # The sealer takes a ledger's rows in order: a chunk's ids are mostly contiguous,
        # read as one range of the primary key rather than thousands of parameters.
        queryset = self._with_body(
            ledger,
            manager.filter(pk__gte=low, pk__lte=high)
            if high - low < 2 * len(ids) and not ledger.record
            else ledger.of_records(manager.all(), ids),
        )
        extra: tuple[str, ...] = ()
        if ledger.kind in _BODY_FIELDS:
            extra = ("body_length", "small_body", "body_purged_at")
        wanted = set(ids)
        rows = {
            row[0]: row
            for row in ledger.with_record_id(queryset).values_list(
                "log_record_id", *paths, *extra
            )
            if row[0] in wanted
        }
        present = [(i, r, t) for i, r, t in entries if r in rows]
        built = ledger.leaf_fields(rows[r][1 : 1 + len(paths)] for _, r, _ in present)
        fields_of = {
            r: fields for (_, r, _), fields in zip(present, built, strict=True)
        }
        ready_key = next(
            (key for key, path in ledger.fields.items() if path == ledger.ready_time),
            None,
        )
        gone_attempts: list[tuple[str, int]] = []
        for index, record_id, text in entries:
            name = _name(ledger, ledger.kind, record_id, index)
            stored: Mapping[str, Any] | None
            if record_id not in rows:
                stored = _decoded(text)
                left = self.drops.left(ledger.kind, stored)
                if left is True:
                    self.report.dropped += 1
                    continue
                if left is not None:  # an attempt: its event must be gone too
                    gone_attempts.append((name, left))
                    continue
                self.report.problem("DELETED", name)
            else:
                fields = fields_of[record_id]
                rebuilt = leaf_encode(ledger.leaf(record_id, fields))
                # The row as it is now gives the entry byte for byte: then what the entry
                # says is what the row says, read without decoding the entry.
                stored = fields if rebuilt == text else _decoded(text)
                if rebuilt != text:
                    self.report.problem(
                        "ALTERED", f"{name}: {self._changed(stored, rebuilt)}"
                    )
                if ledger.kind in _BODY_FIELDS and stored is not None:
                    self._body(ledger, name, index, record_id, stored, rows[record_id])
            if stored is not None and ready_key is not None:
                self._late(ledger, name, index, stored.get(ready_key))
        if gone_attempts:
            events = LEDGERS["inbox_event"].model_class._default_manager
            still_there: set[int] = set(
                events.filter(pk__in={pk for _, pk in gone_attempts}).values_list(
                    "pk", flat=True
                )
            )
            for name, event_pk in gone_attempts:
                if event_pk in still_there:
                    self.report.problem("DELETED", name)
                else:
                    self.report.dropped += 1

    @staticmethod
    def _changed(stored: Mapping[str, Any] | None, rebuilt: str) -> str:
        if stored is None:
            return "its entry is not a canonical leaf"
        now = leaf_decode(rebuilt)
        changed = sorted(k for k in {*stored, *now} if stored.get(k) != now.get(k))
        return "fields changed since it was logged: " + ", ".join(changed)

    def _late(self, ledger: Ledger, name: str, index: int, value: Any) -> None:
        at = _time(value)
        if at is None:
            return
        newest = self.newest.get(ledger.kind)
        if newest is not None and at < newest[0] - self.late_after:
            self.report.problem(
                "LATE",
                f"{name}: its {ledger.ready_time} is {value}, but it was logged after "
                f"log index {newest[1]}, of {newest[0].isoformat()}: logged more than "
                f"AUDIT_SEAL_LOOKBACK_SECONDS after it claims to have happened",
            )
        elif newest is None or at > newest[0]:
            self.newest[ledger.kind] = (at, index)

    def _body(
        self,
        ledger: Ledger,
        name: str,
        index: int,
        record_id: int,
        stored: Mapping[str, Any],
        row: tuple[Any, ...],
    ) -> None:
        expected = stored.get(_BODY_FIELDS[ledger.kind])
        body_length, small_body, purged_at = row[-3:]
        if body_length is None:
            if purged_at is None:
                self.report.problem("ALTERED", f"{name}: body missing, never purged")
            else:
                self.missing[(ledger.kind, record_id)] = (index, purged_at)
            return
        if small_body is None:
            self.large[(ledger.kind, record_id)] = (index, body_length, str(expected))
        elif hashlib.sha256(bytes(small_body)).hexdigest() != expected:
            self.report.problem(
                "ALTERED", f"{name}: body does not match its payload hash"
            )

    def finish(self) -> None:
        for line in self.drops.check():
            self.report.problem("ALTERED", line)
        self._large_bodies()
        valid = self._purges_check()
        for (kind, record_id), (index, purged_at) in sorted(self.missing.items()):
            if valid.get((_PURGE_OF[kind], record_id)) != purge_stamp(purged_at):
                self.report.problem(
                    "ALTERED",
                    f"{_name(LEDGERS[kind], kind, record_id, index)}: "
                    "body missing outside any logged purge",
                )

    def _large_bodies(self) -> None:
        for kind in _BODY_FIELDS:
            wanted = {r: v for (k, r), v in self.large.items() if k == kind}
            ledger = LEDGERS[kind]
            for group in body_groups(
                {r: length for r, (_, length, _) in wanted.items()}
            ):
                for pk, body in ledger.model_class._default_manager.filter(
                    pk__in=group
                ).values_list("pk", "raw_body"):
                    index, _, expected = wanted[pk]
                    if (
                        body is not None
                        and hashlib.sha256(body).hexdigest() != expected
                    ):
                        self.report.problem(
                            "ALTERED",
                            f"{_name(ledger, kind, pk, index)}: body does not match its "
                            "payload hash",
                        )

    def _purges_check(self) -> dict[tuple[str, int], str]:
        """The purge entries that hold: the row (an inbox event, a mismatch) still carries
        the purge's stamp, and the purge's operator action names the row with that stamp.
        (purge kind, row id) -> stamp."""
        if not self.purges:
            return {}
        models = {
            BODY_PURGE: LEDGERS["inbox_event"].model_class,
            EVIDENCE_PURGE: LEDGERS["fingerprint_mismatch"].model_class,
        }
        stamps: dict[tuple[str, int], datetime | None] = {}
        for kind, model in models.items():
            ids = [r for k, r in self.purges if k == kind]
            for pk, purged_at in model._default_manager.filter(pk__in=ids).values_list(
                "pk", "body_purged_at"
            ):
                stamps[(kind, pk)] = purged_at
        actions = {
            pk: (action, event_ids, details)
            for pk, action, event_ids, details in OperatorAction.objects.filter(
                pk__in={f.get("operator_action_id") for _, f in self.purges.values()}
            ).values_list("pk", "action", "event_ids", "details")
        }
        valid: dict[tuple[str, int], str] = {}
        for (kind, record_id), (index, fields) in sorted(self.purges.items()):
            name = _name(LEDGERS[kind], kind, record_id, index)
            stamp = fields.get("purged_at")
            if (kind, record_id) not in stamps:
                continue  # the row's own entry names it DELETED
            stored = stamps[(kind, record_id)]
            if stored is None or purge_stamp(stored) != stamp:
                self.report.problem(
                    "ALTERED",
                    f"{name}: the row no longer carries the stamp of the purge the log "
                    "recorded",
                )
                continue
            action = actions.get(fields.get("operator_action_id"))
            if (
                action is None
                or PURGES.get(action[0], (None,))[0] != kind
                or record_id not in purged_ids(action[0], action[1], action[2])
                or not isinstance(action[2], dict)
                or action[2].get("purged_at") != stamp
            ):
                self.report.problem(
                    "ALTERED",
                    f"{name}: operator action {fields.get('operator_action_id')} is not "
                    "the purge of this row the log recorded",
                )
                continue
            valid[(kind, record_id)] = str(stamp)
        return valid


def _signed(report: LogVerifyReport, text: str, what: str) -> note.Checkpoint | None:
    try:
        checkpoint = note.checkpoint_parse(
            note.note_open(note=text, verifier=log_signer().verifier)
        )
    except note.NoteError as exc:
        report.problem("LOG", f"{what} does not verify with the log's key: {exc}")
        return None
    if checkpoint.origin != settings.AUDIT_LOG_ORIGIN:
        report.problem("LOG", f"{what} is of another log ({checkpoint.origin})")
        return None
    return checkpoint


def _tree_checks(
    report: LogVerifyReport,
    rebuild: TreeRebuild,
    *,
    tree_size: int,
    latest: note.Checkpoint | None,
    kept: Sequence[tuple[KeptCheckpoint, note.Checkpoint]],
) -> None:
    for gap in rebuild.gaps:
        report.problem(
            "LOG", f"entry {gap} is missing: the tree cannot be recomputed past it"
        )
    for position in rebuild.altered_nodes[:_NAMED]:
        report.problem(
            "LOG", f"stored node {position} is not the hash of the entries it covers"
        )
    if latest is not None:
        report.checkpoint_size = latest.size
        if latest.size > rebuild.size:
            report.problem(
                "TRUNCATED",
                f"the log has {rebuild.size} entries, its latest checkpoint signed "
                f"{latest.size}",
            )
        elif latest.size and rebuild.roots.get(latest.size) != latest.root:
            report.problem(
                "REWRITTEN",
                f"the log's first {latest.size} entries are not the tree its latest "
                "checkpoint signed",
            )
    root = rebuild.root()
    for kept_checkpoint, checkpoint in kept:
        what = f"the kept checkpoint {kept_checkpoint.label} (size {checkpoint.size})"
        if checkpoint.size > rebuild.size:
            report.problem(
                "TRUNCATED",
                f"the log has {rebuild.size} entries, fewer than {what}: entries were "
                "cut off",
            )
            continue
        if checkpoint.size and rebuild.roots.get(checkpoint.size) != checkpoint.root:
            report.problem(
                "REWRITTEN",
                f"the log does not extend {what}: its first {checkpoint.size} entries "
                "are not the ones that checkpoint signed",
            )
            continue
        if checkpoint.size and not rebuild.broken and rebuild.size == tree_size:
            try:
                merkle.consistency_verify(
                    size1=checkpoint.size,
                    size2=tree_size,
                    root1=checkpoint.root,
                    root2=root,
                    proof=log_consistency_proof(size1=checkpoint.size, size2=tree_size),
                )
            except merkle.ProofError as exc:
                report.problem(
                    "LOG",
                    f"the stored tree gives no consistency proof from {what}: {exc}",
                )
                continue
        report.notes.append(
            f"the log at size {tree_size} extends {what} (consistency proof verified)"
        )


def _not_logged(report: LogVerifyReport, *, due: datetime) -> None:
    for ledger in scanned_ledgers():
        queryset = unlogged(ledger).filter(**{f"{ledger.ready_time}__lt": due})
        if ledger.ready is not None:
            queryset = queryset.filter(ledger.ready)
        pks = list(
            queryset.order_by("pk").values_list("log_record_id", flat=True)[
                : _NAMED + 1
            ]
        )
        for pk in pks[:_NAMED]:
            report.problem(
                "NOT LOGGED",
                f"{_name(ledger, ledger.kind, pk, None)}: due at the last sealing round, "
                "not in the log",
            )
        if len(pks) > _NAMED:
            more = queryset.count() - _NAMED
            report.problem("NOT LOGGED", f"... and {more} more {ledger.title}s")


def _jobs_explained(report: LogVerifyReport) -> None:
    """A job's status is state, moved only with a transition (``job_status_set``): it must be
    where its transitions end, and each transition must start where the previous ended."""
    for model, name in ((Deployment, "deployment"), (Build, "build")):
        last = (
            JobTransition.objects.filter(job=OuterRef("pk"))
            .order_by("-pk")
            .values("to_status")[:1]
        )
        unexplained = (
            model.objects.annotate(
                transitions_end=Coalesce(Subquery(last), Value("queued"))
            )
            .exclude(status=F("transitions_end"))
            .order_by("pk")
            .values_list("public_id", "status", "transitions_end")
        )
        for public_id, status, end in unexplained[:_NAMED]:
            report.problem(
                "UNEXPLAINED",
                f"{name} {public_id}: its status is {status}, but its transitions end "
                f"at {end}"
                + (" (it has none: a job starts queued)" if end == "queued" else ""),
            )
    breaks = (
        JobTransition.objects.annotate(
            previous=Window(
                Lag("to_status"),
                partition_by=[F("job_id")],
                order_by=F("id").asc(),
            )
        )
        .filter(~Q(from_status=Coalesce(F("previous"), Value("queued"))))
        .order_by("pk")
        .values_list("pk", "from_status", "previous")
    )
    for pk, from_status, previous in breaks[:_NAMED]:
        report.problem(
            "UNEXPLAINED",
            f"job transition {pk}: starts at {from_status}, but the job was "
            f"{previous or 'queued'} before it",
        )


def _chain_checks(report: LogVerifyReport, entries: _Entries) -> None:
    head = (
        AuditSeal.objects.order_by("-sequence")
        .values_list("sequence", "seal_hash")
        .first()
    )
    if entries.retirement is None:
        if head is not None:
            report.problem(
                "NOT LOGGED",
                "the HMAC chain: its seals are not in the log yet (the next sealing round "
                "takes them in)",
            )
        return
    index, sequence, fields = entries.retirement
    recorded = (sequence, fields.get("head_hash", ""))
    now = head or (0, "")
    if now != recorded:
        report.problem(
            "ALTERED",
            f"the retired HMAC chain (log index {index}): it ends at seal #{now[0]} "
            f"({now[1][:16] or 'none'}), the log recorded #{recorded[0]} "
            f"({str(recorded[1])[:16] or 'none'}) when it was retired",
        )
    if fields.get("verified") is False:
        report.notes.append(
            f"the HMAC chain was retired with {fields.get('problem_count')} problems, "
            f"recorded in log entry {index}"
        )


def log_verify(
    *,
    kept: Sequence[KeptCheckpoint] = (),
    now: datetime | None = None,
    chunk_size: int = 5000,
) -> LogVerifyReport:
    """Verifies the log and every ledger against each other (the module's docstring says
    what), in one pass over the leaves; ``kept`` are checkpoints kept outside the database,
    which the log must extend."""
    now = now or timezone.now()
    report = LogVerifyReport()
    latest_row = checkpoint_latest()
    latest = (
        _signed(
            report,
            latest_row.note,
            f"the latest checkpoint (size {latest_row.tree_size})",
        )
        if latest_row is not None
        else None
    )
    kept_signed = [
        (k, c)
        for k in kept
        if (c := _signed(report, k.note, f"the kept checkpoint {k.label}")) is not None
    ]
    sizes = {c.size for _, c in kept_signed} | ({latest.size} if latest else set())
    tree_size = log_size()
    report.size = tree_size
    rebuild = TreeRebuild(roots_at=sizes)
    entries = _Entries(report)
    for chunk in log_leaf_chunks(size=tree_size, chunk_size=chunk_size):
        rebuild.feed([(index, text) for index, _, _, text in chunk])
        entries.feed(chunk)
    entries.finish()
    _tree_checks(report, rebuild, tree_size=tree_size, latest=latest, kept=kept_signed)
    due = now - timedelta(
        seconds=settings.AUDIT_SEAL_HORIZON_SECONDS
        + settings.AUDIT_SEAL_INTERVAL_SECONDS
    )
    _not_logged(report, due=due)
    _jobs_explained(report)
    _chain_checks(report, entries)
    if report.dropped:
        report.notes.append(
            f"{report.dropped} entries name rows that left with days of the inbox "
            f"retention dropped ({len(entries.drops.entries)} logged drops)"
        )
    return report
