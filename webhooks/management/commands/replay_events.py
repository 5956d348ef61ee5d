import sys

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.actors import Actor
from core.errors import ServiceError
from webhooks.bulk_replay import (
    bulk_replay_job_cancel,
    bulk_replay_job_create,
    bulk_replay_job_resume,
    bulk_replay_job_run,
    bulk_replay_job_start,
    bulk_replay_rate_parse,
    bulk_replay_since_check,
)
from webhooks.models import (
    REPLAYABLE_STATUSES,
    BulkReplayJob,
    ProcessingStatus,
    WebhookSource,
)
from webhooks.pacing import RATE_PROMISE
from webhooks.replay import replay_queryset_build
from webhooks.selectors import inbox_events_replay_repeats


def rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.3g}/s"


class Command(BaseCommand):
    help = (
        "Replay inbox events by filter (default: every dead-lettered event), with a progress "
        "bar, optionally at most --rate events per second; resume a failed, cancelled or "
        "interrupted bulk replay job (--resume ID) from where it stopped; or cancel a queued "
        "or running one (--cancel ID --reason R). Recorded as operator actions under the "
        "invoking OS user."
    )

    def add_arguments(self, parser):
        parser.add_argument("--source", metavar="SLUG")
        parser.add_argument(
            "--status",
            default=ProcessingStatus.DEAD_LETTERED,
            choices=sorted(REPLAYABLE_STATUSES),
        )
        parser.add_argument("--since", metavar="ISO", help="received at or after")
        parser.add_argument("--event-id", dest="event_ids", nargs="+", metavar="ID")
        parser.add_argument(
            "--reason",
            help="recorded with the operator actions (required with --cancel)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="only count what would be replayed"
        )
        parser.add_argument(
            "--rate",
            metavar="N",
            help=(
                f"replay {RATE_PROMISE} (a positive number); with --resume, "
                "the job's new rate (else it keeps its own)"
            ),
        )
        parser.add_argument(
            "--resume",
            type=int,
            metavar="JOB_ID",
            help=(
                "go on with this failed, cancelled or interrupted bulk replay job (its own "
                "filter)"
            ),
        )
        parser.add_argument(
            "--cancel",
            type=int,
            metavar="JOB_ID",
            help="cancel this queued or running bulk replay job (needs --reason)",
        )

    def handle(
        self,
        *args,
        source,
        status,
        since,
        event_ids,
        reason,
        dry_run,
        rate,
        resume,
        cancel,
        **opts,
    ):
        user = Actor.command()
        try:
            rate = bulk_replay_rate_parse(rate)
        except ServiceError as exc:
            raise CommandError(f"--rate: {exc}") from None
        if cancel is not None:
            self._cancel(
                cancel,
                user=user,
                reason=reason,
                others=(source, since, event_ids, dry_run, rate, resume),
            )
            return
        if resume is not None:
            if source or since or event_ids or dry_run:
                raise CommandError(
                    "--resume takes the job's own filter: no --source, --since, "
                    "--event-id or --dry-run"
                )
            try:
                job = bulk_replay_job_resume(
                    job_id=resume,
                    resumed_by=user,
                    reason=reason or "replay_events --resume",
                    rate=rate,
                    publish=False,
                )
            except ServiceError as exc:
                raise CommandError(str(exc)) from None
            self._run(job)
            return
        source_obj = None
        if source:
            source_obj = WebhookSource.objects.filter(slug=source).first()
            if source_obj is None:
                raise CommandError(f"unknown source {source!r}")
        since_dt = None
        if since:
            try:
                since_dt = parse_datetime(since)
            except ValueError:
                since_dt = None
            if since_dt is None or since_dt.tzinfo is None:
                raise CommandError("--since must be an ISO 8601 time with a UTC offset")
            try:
                bulk_replay_since_check(since_dt)
            except ServiceError as exc:
                raise CommandError(f"--{exc}") from None
        job = bulk_replay_job_create(
            source=source_obj,
            status=status,
            since=since_dt,
            event_ids=event_ids or [],
            reason=reason or "replay_events command",
            rate=rate,
            created_by=user,
        )
        self.stdout.write(f"{job.dry_run_count} events match")
        repeats = inbox_events_replay_repeats(
            events_queryset=replay_queryset_build(
                source_slug=source, status=status, since=since_dt, event_ids=event_ids
            )
        )
        if repeats:
            self.stdout.write(
                f"{repeats} of them were dead-lettered because their data was rejected: a "
                "replay sends the same bytes, which will be rejected again unless the "
                "handler changed since"
            )
        if dry_run or job.dry_run_count == 0:
            return
        self._run(bulk_replay_job_start(job=job, started_by=user, publish=False))

    def _cancel(self, job_id: int, *, user: Actor, reason: str | None, others) -> None:
        if any(value not in (None, False) for value in others):
            raise CommandError(
                "--cancel takes only the job id and --reason: no filter, --dry-run, "
                "--rate or --resume"
            )
        if not reason or not reason.strip():
            raise CommandError("--cancel needs --reason (recorded with the cancel)")
        try:
            job = bulk_replay_job_cancel(
                job_id=job_id, reason=reason, cancelled_by=user
            )
        except ServiceError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"cancelled bulk replay #{job.pk} after {job.processed}/"
            f"{job.total or job.dry_run_count} events; `replay_events --resume {job.pk}` "
            "goes on with it"
        )

    def _run(self, job: BulkReplayJob) -> None:
        """Runs the job's chunks here rather than on a worker (at its rate, if it has one);
        interrupted (Ctrl-C), the job fails and ``--resume`` goes on with it. Cancelled from
        elsewhere, it stops after its current chunk and the command fails."""
        ran = bulk_replay_job_run(job_id=job.pk, run=job.run, progress=self._progress)
        if ran is None:
            raise CommandError(f"bulk replay #{job.pk} is gone")
        job = ran
        self.stdout.write("")
        if job.state == BulkReplayJob.State.CANCELLED:
            raise CommandError(
                f"bulk replay #{job.pk} was cancelled after {job.processed}/{job.total} "
                f"events; `replay_events --resume {job.pk}` goes on with it"
            )
        self.stdout.write(
            f"replayed {job.processed} events (bulk replay #{job.pk}); "
            f"rate {rate_text(job.rate_measured())}"
            + (f", asked {rate_text(job.rate)}" if job.rate is not None else "")
        )

    def _progress(self, job: BulkReplayJob) -> None:
        done, total = job.processed, job.total
        width = 30
        filled = width * done // total if total else width
        bar = "#" * filled + "-" * (width - filled)
        line = f"\r[{bar}] {done}/{total} {rate_text(job.rate_measured())}"
        if job.rate is not None:
            line += f" (asked {rate_text(job.rate)})"
        end = job.finish_estimated()
        if end is not None:
            line += f" ends ~{timezone.localtime(end):%Y-%m-%d %H:%M:%S %Z}"
        self.stdout.write(line, ending="")
        if hasattr(sys.stdout, "flush"):
            self.stdout.flush()
