"""Runs a command as the terminal's foreground job, for ``make run``: a Ctrl-C then stops
that command (honcho, which stops web, worker and beat) and not make.

A terminal's Ctrl-C sends SIGINT to its whole foreground process group, and make is in it:
GNU make answers it by waiting for its recipe, printing ``make: *** [...] Interrupt`` when
the recipe's shell died of the signal, and killing itself with SIGINT (status 130), whatever
the recipe does with its command's status. So the command runs in a process group of its own,
made the terminal's foreground group before it starts; make, its shell and this launcher stay
in the background group, where no Ctrl-C reaches them. When the command ends, the terminal
goes back to make's group.

A stop asked for (the command ended by SIGINT or SIGTERM, or with honcho's statuses for them,
130 and 143) is a clean end: the launcher exits 0. Any other status is passed on. Without a
terminal (or when make is not its foreground job: ``make run &``), the terminal is left
alone, and a SIGINT or SIGTERM the launcher receives (one sent to make's process group) is
passed on to the command's group.

    python scripts/foreground.py .venv/bin/honcho start -f Procfile
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

# What a command stopped on purpose ends with: killed by the signal, or a shell's (and
# honcho's) 128 + the signal's number.
STOPPED = {
    -signal.SIGINT,
    -signal.SIGTERM,
    128 + signal.SIGINT,
    128 + signal.SIGTERM,
}


def _terminal() -> int | None:
    """The controlling terminal, when this process's group is its foreground job."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _foreground(fd: int, group: int) -> None:
    """Makes ``group`` the terminal's foreground group. A process outside the foreground
    group that does this is sent SIGTTOU (which would stop it): ignored meanwhile."""
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, group)
    finally:
        signal.signal(signal.SIGTTOU, previous)


def run(command: list[str]) -> int:
    terminal = _terminal()
    own_group = os.getpgrp()

    def start_in_own_group() -> None:
        # In the child, before the command starts: a group of its own, in the foreground
        # already when the command's first instruction runs (no Ctrl-C can fall between).
        os.setpgid(0, 0)
        if terminal is not None:
            _foreground(terminal, os.getpgrp())

    # preexec_fn is safe here: the launcher has one thread.
    child = subprocess.Popen(command, preexec_fn=start_in_own_group)

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        status = child.wait()
    finally:
        if terminal is not None:
            with contextlib.suppress(OSError):
                if os.tcgetpgrp(terminal) == child.pid:
                    _foreground(terminal, own_group)
            os.close(terminal)
    return 0 if status in STOPPED else status


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: foreground.py COMMAND [ARG...]")
    sys.exit(run(sys.argv[1:]))
