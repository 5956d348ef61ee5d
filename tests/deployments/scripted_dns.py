"""Names whose answers a test scripts, for a real process: what a DNS server under an
attacker's control does (rebinding: one answer when a name is checked, another when it is
connected to), without one.

A script is a JSON file: for each name, the answers of its successive lookups, the last one
repeated (``{"ci.rebind.test": [["::1"], ["127.0.0.1"]]}``; an empty answer is a name that
does not resolve). Every lookup of a scripted name, in any process, is appended to the file
``<script>.lookups``, one line each. Other names resolve as usual.

Run a command under it: ``python -m tests.deployments.scripted_dns SCRIPT COMMAND ARGS...``
(a Celery worker: ``COMMAND`` is its ``celery`` executable). The process and the children it
forks resolve through the script (``socket.getaddrinfo``, which ``socket.create_connection``
and every HTTP client of the product go through).
"""

from __future__ import annotations

import fcntl
import json
import runpy
import socket
import sys
from pathlib import Path


def lookups_path(script: Path) -> Path:
    return script.with_name(script.name + ".lookups")


def lookups(script: Path, name: str) -> int:
    """How many times ``name`` was looked up so far."""
    try:
        lines = lookups_path(script).read_text().splitlines()
    except FileNotFoundError:
        return 0
    return lines.count(name)


def install(script: Path) -> None:
    real = socket.getaddrinfo

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        name = host.decode() if isinstance(host, bytes) else host
        answers = json.loads(script.read_text()).get(name)
        if answers is None:
            return real(host, port, family, type, proto, flags)
        with open(lookups_path(script), "a+") as log:
            fcntl.flock(log, fcntl.LOCK_EX)  # processes of one worker look up at once
            log.seek(0)
            done = log.read().splitlines().count(name)
            log.write(name + "\n")
        addresses = answers[min(done, len(answers) - 1)]
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        found = []
        for address in addresses:
            found += real(address, port, family, type, proto, socket.AI_NUMERICHOST)
        return found

    socket.getaddrinfo = getaddrinfo


if __name__ == "__main__":
    install(Path(sys.argv[1]))
    sys.argv = sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
