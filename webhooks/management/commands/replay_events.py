import getpass
import sys

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_datetime

from webhooks.models import (
    REPLAYABLE_STATUSES,
    BulkReplayJob,
    ProcessingStatus,
    WebhookSource,
)
from webhooks.replay import (
    BulkReplayJobNotResumable,
    bulk_replay_job_create,
    bulk_replay_job_resume,
    bulk_replay_job_run,
    bulk_replay_job_start,
)


class Command(BaseCommand):
    help = (
        "Replay inbox events by filter (default: every dead-lettered event), with a progress "
        "bar, or resume a failed or interrupted bulk replay job (--resume ID) from where it "
        "stopped. Recorded as operator actions under the invoking OS user."
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
        parser.add_argument("--reason", default="replay_events command")
        parser.add_argument(
            "--dry-run", action="store_true", help="only count what would be replayed"
        )
        parser.add_argument(
            "--resume",
            type=int,
            metavar="JOB_ID",
            help="go on with this failed or interrupted bulk replay job (its own filter)",
        )

    def handle(
        self, *args, source, status, since, event_ids, reason, dry_run, resume, **opts
    ):
        user = f"os:{getpass.getuser()}"
        if resume is not None:
            if source or since or event_ids or dry_run:
                raise CommandError(
                    "--resume takes the job's own filter: no --source, --since, "
                    "--event-id or --dry-run"
                )
            try:
                job = bulk_replay_job_resume(
                    job_id=resume, resumed_by_name=user, publish=False
                )
            except BulkReplayJob.DoesNotExist:
                raise CommandError(f"no bulk replay #{resume}") from None
            except BulkReplayJobNotResumable as exc:
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
            since_dt = parse_datetime(since)
            if since_dt is None or since_dt.tzinfo is None:
                raise CommandError("--since must be an ISO 8601 time with a UTC offset")
        job = bulk_replay_job_create(
            source=source_obj,
            status=status,
            since=since_dt,
            event_ids=event_ids or [],
            reason=reason,
            created_by_name=user,
        )
        self.stdout.write(f"{job.dry_run_count} events match")
        if dry_run or job.dry_run_count == 0:
            return
        self._run(bulk_replay_job_start(job=job, started_by_name=user, publish=False))

    def _run(self, job: BulkReplayJob) -> None:
        """Runs the job's chunks here rather than on a worker; interrupted (Ctrl-C), the job
        fails and ``--resume`` goes on with it."""
        job = bulk_replay_job_run(job_id=job.pk, run=job.run, progress=self._progress)
        self.stdout.write("")
        self.stdout.write(f"replayed {job.processed} events (bulk replay #{job.pk})")

    def _progress(self, done: int, total: int) -> None:
        width = 30
        filled = width * done // total if total else width
        bar = "#" * filled + "-" * (width - filled)
        self.stdout.write(f"\r[{bar}] {done}/{total}", ending="")
        if hasattr(sys.stdout, "flush"):
            self.stdout.flush()
