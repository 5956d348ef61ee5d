"""Fails fast, with a clear message, when the test suite's services cannot be reached."""

import os
import shutil
import socket
import subprocess
import sys
from urllib.parse import urlparse

SERVICES = {
    "PostgreSQL": os.environ.get(
        "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/app"
    ),
    "Redis": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15"),
    # The broker-dependent tests run on both brokers the product supports.
    "RabbitMQ": os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//"),
}


def reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname, parsed.port), timeout=3):
            return True
    except OSError:
        return False


def rabbitmqctl_refusal() -> str | None:
    """Each test on RabbitMQ gets a virtual host of its own (tests/broker.py), made with the
    server's ``rabbitmqctl``: why it cannot be used here, or None."""
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    try:
        result = subprocess.run(
            [ctl, "-q", "list_vhosts"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"rabbitmqctl cannot run ({exc})"
    if result.returncode != 0:
        return f"rabbitmqctl list_vhosts failed: {(result.stderr or result.stdout).strip()}"
    return None


def main() -> int:
    down = [
        f"{name} at {urlparse(url).netloc}"
        for name, url in SERVICES.items()
        if not reachable(url)
    ]
    if not down and (refusal := rabbitmqctl_refusal()):
        down.append(
            f"RabbitMQ's rabbitmqctl, which makes each test's virtual host: {refusal} "
            "(run the tests as root or as RabbitMQ's user)"
        )
    if down:
        print(
            "The test suite needs these services, which cannot be reached:",
            file=sys.stderr,
        )
        for item in down:
            print(f"  - {item}", file=sys.stderr)
        print(
            "Start them (see README, 'make test') or point DATABASE_URL / "
            "CELERY_BROKER_URL / RABBITMQ_URL at running ones.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
