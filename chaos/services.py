"""Private PostgreSQL and Redis servers for the chaos suite.

The suite restarts them and cuts their connections, so it runs its own: the machine's shared
services, and anything else using them, are never disturbed. On loopback by default; the
cluster run (chaos.cluster) starts each on a host of its own: a network namespace, named by the
command that runs each of the server's commands there (``wrap``), and that host's address."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(
    port: int, *, up: bool, timeout: float = 60, host: str = "127.0.0.1"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                is_up = True
        except OSError:
            is_up = False
        if is_up == up:
            return
        time.sleep(0.1)
    raise RuntimeError(f"port {port} did not go {'up' if up else 'down'} in {timeout}s")


def _as_postgres_user() -> list[str]:
    # PostgreSQL refuses to run as root; on a root shell, run it as the postgres user.
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class PrivatePostgres:
    """``host``: the address it listens on besides loopback; ``trust``: the networks whose
    clients it lets in (loopback always); ``wrap``: the command its commands run under."""

    def __init__(
        self,
        root: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        trust: Sequence[str] = (),
        wrap: Sequence[str] = (),
    ):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bins:
            raise RuntimeError(
                "PostgreSQL server binaries not found under /usr/lib/postgresql"
            )
        self.bin = Path(bins[-1])
        self.dir = root / "pg"
        self.host = host
        self.port = port or _free_port()
        self.trust = list(trust)
        self.wrap = list(wrap)

    @property
    def url(self) -> str:
        return f"postgres://postgres@{self.host}:{self.port}/chaos"

    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [
                *self.wrap,
                *_as_postgres_user(),
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.dir / "data"),
                "-w",
                "-t",
                "60",
                *args,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def init(self) -> None:
        self.dir.mkdir(parents=True)
        if os.geteuid() == 0:
            # mkdtemp's folders are private to root: the postgres user must reach its own.
            self.dir.parent.chmod(0o755)
            shutil.chown(self.dir, "postgres", "postgres")
        subprocess.run(
            [
                *self.wrap,
                *_as_postgres_user(),
                str(self.bin / "initdb"),
                "-D",
                str(self.dir / "data"),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        with open(self.dir / "data" / "pg_hba.conf", "a") as hba:
            hba.writelines(f"host all all {network} trust\n" for network in self.trust)
        self.start()
        subprocess.run(
            [
                str(self.bin / "createdb"),
                "-h",
                self.host,
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "chaos",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        listen = ",".join(dict.fromkeys(["127.0.0.1", self.host]))
        options = (
            f"-p {self.port} -c listen_addresses={listen} -k {self.dir} "
            "-c max_connections=200"
        )
        self._pg_ctl("-o", options, "-l", str(self.dir / "server.log"), "start")
        _wait_port(self.port, up=True, host=self.host)

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-m", mode, "stop")

    def restart(self) -> None:
        """Every connection drops, as when the database fails over."""
        self.stop("immediate")
        self.start()

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRedis:
    """``host``: the address it listens on besides loopback; ``wrap``: the command its
    commands run under."""

    def __init__(
        self,
        root: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        wrap: Sequence[str] = (),
    ):
        self.dir = root / "redis"
        self.host = host
        self.port = port or _free_port()
        self.wrap = list(wrap)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def _cli(self, *args: str) -> None:
        subprocess.run(
            ["redis-cli", "-h", self.host, "-p", str(self.port), *args],
            capture_output=True,
            timeout=30,
        )

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        # Append-only file on: a restart keeps the queued messages, as a production broker does.
        subprocess.run(
            [
                *self.wrap,
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                " ".join(dict.fromkeys(["127.0.0.1", self.host])),
                # No password: clients on ``host`` are let in too (a private namespace's
                # address in the cluster run).
                "--protected-mode",
                "no",
                "--port",
                str(self.port),
                "--dir",
                str(self.dir),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--pidfile",
                str(self.dir / "redis.pid"),
                "--logfile",
                str(self.dir / "redis.log"),
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        _wait_port(self.port, up=True, host=self.host)

    def stop(self) -> None:
        self._cli("shutdown")
        _wait_port(self.port, up=False, host=self.host)

    def restart(self) -> None:
        self.stop()
        self.start()

    def destroy(self) -> None:
        self._cli("shutdown", "nosave")
        shutil.rmtree(self.dir, ignore_errors=True)
