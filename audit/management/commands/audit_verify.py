import re

from django.core.management.base import BaseCommand, CommandError

from audit.services import audit_trail_verify

_HEAD = re.compile(r"^(\d+):([0-9a-f]{64})$")


def head_parse(value: str) -> tuple[int, str]:
    match = _HEAD.match(value.strip())
    if not match:
        raise ValueError(value)
    return int(match[1]), match[2]


class Command(BaseCommand):
    help = (
        "Recompute the sealed audit trail's keyed hash chain and compare every sealed inbox "
        "row (fields and body) and operator action with the database; names what was altered "
        "or deleted, prints the chain's head (keep it elsewhere) and exits non-zero on any "
        "failure."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--expect-head",
            metavar="SEQ:HASH",
            help=(
                "a head printed by an earlier run: fails if the chain no longer holds that "
                "seal with that hash (cut short, or rewritten from there)"
            ),
        )

    def handle(self, *args, expect_head=None, **options):
        expected = None
        if expect_head is not None:
            try:
                expected = head_parse(expect_head)
            except ValueError:
                raise CommandError(
                    "--expect-head must be SEQ:HASH, as printed by audit_verify "
                    "(a sequence number, a colon, 64 hex digits)"
                ) from None
        report = audit_trail_verify(expect_head=expected)
        for problem in report.broken_seals:
            self.stderr.write(f"BROKEN {problem}")
        for pk in report.altered_rows:
            self.stderr.write(f"ALTERED inbox event {pk}: {report.row_problems[pk]}")
        for pk in report.deleted_rows:
            self.stderr.write(f"DELETED inbox event {pk}")
        for pk in report.altered_actions:
            self.stderr.write(f"ALTERED operator action {pk}")
        for pk in report.deleted_actions:
            self.stderr.write(f"DELETED operator action {pk}")
        if report.head_problem:
            self.stderr.write(report.head_problem)
        if report.head is None:
            self.stdout.write("head: none (nothing sealed yet)")
        else:
            self.stdout.write(f"head: {report.head[0]}:{report.head[1]}")
        summary = (
            f"{report.seals_checked} seals, {report.rows_checked} sealed rows checked, "
            f"{report.actions_checked} operator actions checked"
        )
        if report.legacy_seals:
            summary += (
                f" ({report.legacy_seals} seals of version 1: their rows are sealed by "
                "id, payload hash and received time only)"
            )
        if not report.ok:
            raise CommandError(
                f"audit trail verification FAILED: {summary}; "
                f"{len(report.altered_rows)} altered and {len(report.deleted_rows)} "
                f"deleted rows, {len(report.altered_actions)} altered and "
                f"{len(report.deleted_actions)} deleted operator actions, "
                f"{len(report.broken_seals)} broken seals"
                + ("; the expected head does not hold" if report.head_problem else "")
            )
        self.stdout.write(f"audit trail OK: {summary}")
