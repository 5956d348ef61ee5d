from django.core.management.base import BaseCommand, CommandError

from audit.services import audit_trail_verify


class Command(BaseCommand):
    help = (
        "Recompute the sealed audit trail's hash chain and compare every sealed inbox row with "
        "the database; names altered or deleted rows and exits non-zero on any failure."
    )

    def handle(self, *args, **options):
        report = audit_trail_verify()
        for problem in report.broken_seals:
            self.stderr.write(f"BROKEN {problem}")
        for pk in report.altered_rows:
            self.stderr.write(f"ALTERED inbox event {pk}")
        for pk in report.deleted_rows:
            self.stderr.write(f"DELETED inbox event {pk}")
        summary = (
            f"{report.seals_checked} seals, {report.rows_checked} sealed rows checked"
        )
        if not report.ok:
            raise CommandError(
                f"audit trail verification FAILED: {summary}; "
                f"{len(report.altered_rows)} altered, {len(report.deleted_rows)} deleted, "
                f"{len(report.broken_seals)} broken seals"
            )
        self.stdout.write(f"audit trail OK: {summary}")
