"""Links through the project's TCP fault proxy (``tests.outages.TcpProxy``), as a process of a
host of the cluster run (chaos.cluster): each ``--link NAME=PORT`` listens on ``--listen``:PORT
and passes every connection to ``--target``, bytes untouched until the control file says
otherwise. ``--control`` is a JSON object ``{NAME: {"delay": seconds, "loss": probability}}``,
read again whenever it is replaced; a link it does not name (or no file) passes bytes as
they come.

    python -m chaos.linkproxy --listen 10.213.7.10 --target 127.0.0.1:5432 \\
        --link web1=6401 --link worker1=6403 --control links.json --seed 7
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from tests.outages import TcpProxy


def modes_read(control: Path) -> tuple[tuple[int, int] | None, dict]:
    """The control file's identity (inode and change time; None: no file) and content."""
    try:
        stat = control.stat()
        return (stat.st_ino, stat.st_mtime_ns), json.loads(control.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None, {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--target", required=True, help="HOST:PORT")
    parser.add_argument("--link", action="append", default=[], help="NAME=PORT")
    parser.add_argument("--control", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    target_host, _, target_port = args.target.rpartition(":")
    proxies = {}
    for n, link in enumerate(args.link):
        name, _, port = link.partition("=")
        seed = None if args.seed is None else args.seed + n
        proxies[name] = TcpProxy(
            target_host, int(target_port), listen=(args.listen, int(port)), seed=seed
        )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"linkproxy: {sorted(proxies)} to {args.target}", flush=True)
    seen: object = ()
    while True:
        identity, modes = modes_read(args.control)
        if identity != seen:
            seen = identity
            for name, proxy in proxies.items():
                mode = modes.get(name, {})
                proxy.slow(float(mode.get("delay", 0)))
                proxy.lossy(float(mode.get("loss", 0)))
            print(f"linkproxy: {modes}", flush=True)
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
