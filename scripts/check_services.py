"""Fails fast, with a clear message, when the test suite's services cannot be reached."""

import os
import socket
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


def main() -> int:
    down = [
        f"{name} at {urlparse(url).netloc}"
        for name, url in SERVICES.items()
        if not reachable(url)
    ]
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
