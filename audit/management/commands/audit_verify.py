import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.services import audit_trail_verify
from audit.verification import KeptCheckpoint, log_verify

_HEAD = re.compile(r"^(\d+):([0-9a-f]{64})$")


def head_parse(value: str) -> tuple[int, str]:
    match = _HEAD.match(value.strip())
    if not match:
        raise ValueError(value)
    return int(match[1]), match[2]


def _kept(paths: list[str]) -> list[KeptCheckpoint]:
    kept = []
    for name in paths:
        try:
            text = Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"--since {name}: cannot be read ({exc})") from None
        kept.append(KeptCheckpoint(label=name, note=text))
    folder = settings.AUDIT_CHECKPOINT_DIR
    latest = Path(folder) / "latest" if folder else None
    if latest is not None and latest.is_file():
        # The copy the product keeps outside the database is checked too.
        kept.append(
            KeptCheckpoint(
                label=f"{latest} (AUDIT_CHECKPOINT_DIR)",
                note=latest.read_text(encoding="utf-8"),
            )
        )
    return kept


class Command(BaseCommand):
    help = (
        "Verify the audit trail: the verifiable log against every ledger (each entry against "
        "its row and body, every row due and not in the log, job statuses against their "
        "transitions, the tree against its signed checkpoints and against the checkpoints "
        "given with --since), and the retired HMAC chain for the period it covers. Names "
        "what fails, one line each, and exits non-zero on any failure."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since",
            metavar="CHECKPOINT_FILE",
            action="append",
            default=[],
            help=(
                "a checkpoint kept outside the database (GET /audit/checkpoint, a file of "
                "AUDIT_CHECKPOINT_DIR): fails unless today's log extends it (entries cut "
                "off, or rewritten under it). May be given several times."
            ),
        )
        parser.add_argument(
            "--expect-head",
            metavar="SEQ:HASH",
            help=(
                "a head of the retired HMAC chain printed by an earlier run: fails if the "
                "chain no longer holds that seal with that hash"
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        expected = None
        if options.get("expect_head") is not None:
            try:
                expected = head_parse(options["expect_head"])
            except ValueError:
                raise CommandError(
                    "--expect-head must be SEQ:HASH, as printed by audit_verify "
                    "(a sequence number, a colon, 64 hex digits)"
                ) from None
        kept = _kept(options["since"])
        chain = audit_trail_verify(expect_head=expected)
        log = log_verify(kept=kept)
        for line in chain.problem_lines():
            self.stderr.write(f"{line} (HMAC chain)")
        for line in log.problems:
            self.stderr.write(line)
        for line in log.notes:
            self.stdout.write(line)
        if chain.head is None:
            self.stdout.write("head: none (nothing sealed by the retired HMAC chain)")
        else:
            self.stdout.write(f"head: {chain.head[0]}:{chain.head[1]}")
        checkpoint = (
            f"its latest checkpoint at size {log.checkpoint_size}"
            if log.checkpoint_size is not None
            else "no checkpoint yet"
        )
        summary = (
            f"log of {log.size} entries, {checkpoint}, {log.entries_checked} entries "
            f"checked; retired HMAC chain: {chain.seals_checked} seals, "
            f"{chain.rows_checked} sealed rows checked, {chain.actions_checked} operator "
            "actions checked"
        )
        if chain.legacy_seals:
            summary += (
                f" ({chain.legacy_seals} seals of version 1: their rows are sealed by "
                "id, payload hash and received time only)"
            )
        if not (chain.ok and log.ok):
            counts = ", ".join(f"{n} {what}" for what, n in sorted(log.counts.items()))
            chain_problems = len(chain.problem_lines())
            raise CommandError(
                f"audit trail verification FAILED: {summary}; "
                + "; ".join(
                    part
                    for part in (
                        counts,
                        f"{chain_problems} problems of the HMAC chain"
                        if chain_problems
                        else "",
                    )
                    if part
                )
            )
        self.stdout.write(f"audit trail OK: {summary}")
