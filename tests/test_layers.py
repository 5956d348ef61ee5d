"""The import contracts of docs/architecture.md ("Layers"), as ``make test`` checks them with
``lint-imports``: they hold on the tree, and a change that breaks one fails the run."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

pytestmark = pytest.mark.slow


@pytest.fixture
def tree(tmp_path):
    """A copy of the project's packages and its contracts, to break on purpose."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in config["tool"]["importlinter"]["root_packages"]:
        shutil.copytree(
            ROOT / package,
            tmp_path / package,
            ignore=shutil.ignore_patterns("__pycache__", "migrations"),
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def lint(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contracts_hold(tree):
    result = lint(tree)
    assert result.returncode == 0, result.stdout
    assert "0 broken" in result.stdout


def test_core_importing_an_app_breaks_the_layers(tree):
    (tree / "core" / "probe.py").write_text("import webhooks.models  # noqa\n")
    result = lint(tree)
    assert result.returncode != 0
    assert "Layers: each app imports only the layers below it BROKEN" in result.stdout
    assert "core.probe -> webhooks.models" in result.stdout


def test_deployments_importing_the_inbox_breaks_its_contract(tree):
    (tree / "deployments" / "probe.py").write_text("import webhooks.schemes  # noqa\n")
    result = lint(tree)
    assert result.returncode != 0
    assert "Research and deployments know nothing of the inbox BROKEN" in result.stdout


def test_the_trail_importing_an_app_breaks_the_layers(tree):
    (tree / "trail" / "probe.py").write_text("import webhooks.models  # noqa\n")
    result = lint(tree)
    assert result.returncode != 0
    assert "trail.probe -> webhooks.models" in result.stdout


def test_a_service_importing_its_tasks_breaks_the_acyclic_contract(tree):
    services = tree / "deployments" / "services" / "attempts.py"
    services.write_text(services.read_text() + "\nfrom .. import tasks  # noqa\n")
    result = lint(tree)
    assert result.returncode != 0
    assert "No circles between the modules of a package" in result.stdout
    assert "BROKEN" in result.stdout


def test_jobs_importing_the_attempts_that_use_them_breaks_the_acyclic_contract(tree):
    jobs = tree / "deployments" / "services" / "jobs.py"
    jobs.write_text(jobs.read_text() + "\nfrom . import attempts  # noqa\n")
    result = lint(tree)
    assert result.returncode != 0
    assert "No circles between the modules of a package" in result.stdout
    assert ".jobs -> .attempts" in result.stdout


def test_one_integration_importing_another_breaks_their_independence(tree):
    probe = tree / "integrations" / "github" / "probe.py"
    probe.write_text("import integrations.research.events  # noqa\n")
    result = lint(tree)
    assert result.returncode != 0
    assert "Integrations are independent of each other BROKEN" in result.stdout
