"""The payload fixtures of the integrations (``integrations/<name>/fixtures/<event>__<variant>
.json``): the bodies producers really send, read the one way every test reads them. Plain
Python, so that ``bench`` and ``chaos`` can use it before Django is set up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def fixture_path(integration: str, name: str) -> Path:
    return ROOT / "integrations" / integration / "fixtures" / f"{name}.json"


def fixture_bytes(integration: str, name: str) -> bytes:
    """The fixture's bytes as stored: what a producer signs and sends."""
    return fixture_path(integration, name).read_bytes()


def fixture_json(integration: str, name: str) -> Any:
    """The fixture parsed: a fresh object on every call, free to change."""
    return json.loads(fixture_bytes(integration, name))
