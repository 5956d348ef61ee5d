"""``make run`` stopped as a newcomer stops it: Ctrl-C in the terminal it runs in. The test
gives ``make run`` a pseudo-terminal as its controlling terminal and types ``^C`` into it:
the kernel then sends SIGINT to the terminal's foreground process group, exactly as a
terminal does. make must end with status 0, print no ``make: ***`` line, and leave no
process behind."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import time
from pathlib import Path

import pytest
import requests

from tests.processes import ROOT, embedded_env, free_port, wait_until

pytestmark = pytest.mark.slow


def _read(fd: int, timeout: float) -> bytes:
    ready, _, _ = select.select([fd], [], [], timeout)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:  # the terminal's last process closed it
        return b""


def _processes_with(marker: str) -> list[int]:
    """The processes whose environment holds ``marker`` (this test's own data directory):
    make, honcho, and every process web, worker and beat started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def test_ctrl_c_in_the_terminal_ends_make_run_with_status_0(tmp_path):
    port = free_port()
    env = embedded_env(tmp_path, port)
    env["CELERY_METRICS_PORT"] = str(free_port())
    env.pop("MAKEFLAGS", None)
    env.pop("MAKELEVEL", None)
    marker = f"APP_VAR_DIR={tmp_path}"
    # The venv is set up already (and shared): make must not build it again.
    command = ["make", "--no-print-directory", "-o", ".venv/.installed", "run"]

    pid, master = pty.fork()  # the child: a session of its own, the pty its terminal
    if pid == 0:  # pragma: no cover - the child
        try:
            os.chdir(ROOT)
            os.execvpe("make", command, env)  # noqa: S606 - make from PATH, as typed
        finally:
            os._exit(127)

    output = bytearray()
    status = None
    try:
        deadline = time.monotonic() + 240
        answered = False
        while time.monotonic() < deadline and not answered:
            output += _read(master, 0.5)
            with contextlib.suppress(requests.RequestException):
                answered = (
                    requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok
                    and b"beat.1" in output
                    and b"worker.1" in output
                )
        assert answered, output.decode(errors="replace")[-4000:]
        time.sleep(2)  # the worker and beat past their start
        os.write(master, b"\x03")  # Ctrl-C, as typed

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            output += _read(master, 0.5)
            done, raw = os.waitpid(pid, os.WNOHANG)
            if done:
                status = raw
                break
        output += _read(master, 0.5)
    finally:
        if status is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            for leftover in _processes_with(marker):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(leftover, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(master)

    text = output.decode(errors="replace")
    assert status is not None, text[-4000:]
    assert os.WIFEXITED(status), (
        f"make was killed by signal {os.WTERMSIG(status)}",
        text[-4000:],
    )
    assert os.WEXITSTATUS(status) == 0, text[-4000:]
    assert "make: ***" not in text, text[-4000:]
    assert "SIGINT received" in text, text[-4000:]  # honcho, which stopped all three
    for process in ("web", "worker", "beat"):
        assert f"{process}.1" in text, text[-4000:]
    # make has returned: what it started goes with it (none left once they are gone).
    leftovers: list[int] = []

    def all_gone() -> bool:
        leftovers[:] = _processes_with(marker)
        return not leftovers

    try:
        wait_until(all_gone, timeout=10, what="no process of make run left")
    except AssertionError:
        raise AssertionError((leftovers, text[-4000:])) from None
