"""A job's idempotency record follows the job through one function called from one place
(docs/subsystems/idempotency.md, "A key's life"): read from the source, so that a new step
of the worker cannot copy the job's state into its key by hand again."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PRODUCT = [
    "audit",
    "core",
    "deployments",
    "demo",
    "idempotency",
    "integrations",
    "research",
]


def calls_of(name: str) -> set[str]:
    """Where ``name(...)`` is called in the product: ``path::enclosing function``."""
    found = set()
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            for function in ast.walk(tree):
                if not isinstance(function, ast.FunctionDef):
                    continue
                for node in ast.walk(function):
                    if not isinstance(node, ast.Call):
                        continue
                    called = node.func
                    called_name = (
                        called.attr if isinstance(called, ast.Attribute) else called
                    )
                    if isinstance(called_name, ast.Name):
                        called_name = called_name.id
                    if called_name == name:
                        found.add(f"{path.relative_to(ROOT)}::{function.name}")
    return found


def test_the_key_s_record_is_written_by_the_mirror_alone():
    mirror = {"deployments/services/jobs.py::job_key_mirror"}
    assert calls_of("idempotency_record_resolve") == mirror
    assert calls_of("idempotency_record_progress_deadline_set") == mirror


def test_the_mirror_is_called_by_the_one_save_of_a_job_s_state():
    assert calls_of("job_key_mirror") == {"deployments/services/jobs.py::job_save"}


def test_the_services_save_a_job_through_job_save_alone():
    saves = {
        place for place in calls_of("save") if place.startswith("deployments/services/")
    }
    assert saves == {"deployments/services/jobs.py::job_save"}
