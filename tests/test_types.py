"""The type checker, as ``make test`` runs it (``mypy``, configured in pyproject.toml): a type
error in a service, or in the body of a function that has no annotations, fails the run."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MYPY = Path(sys.executable).parent / "mypy"

pytestmark = pytest.mark.slow


def test_a_type_error_fails_the_check(tmp_path):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in config["tool"]["mypy"]["files"]:
        shutil.copytree(
            ROOT / package,
            tmp_path / package,
            ignore=shutil.ignore_patterns("__pycache__", "migrations"),
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (tmp_path / "core" / "actors.py").open("a") as actors:
        actors.write("\n\ndef _probe() -> int:\n    return Actor.system().name\n")
    with (tmp_path / "webhooks" / "sources.py").open("a") as sources:  # no annotations
        sources.write("\n\ndef _probe(source):\n    return len(source.pk + 1) + 'a'\n")

    result = subprocess.run(
        [str(MYPY), "--cache-dir", str(tmp_path / ".mypy_cache")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode != 0, result.stdout
    assert "core/actors.py:" in result.stdout
    assert 'Incompatible return value type (got "str", expected "int")' in result.stdout
    # check_untyped_defs: the body of a function without annotations is checked too.
    assert "webhooks/sources.py:" in result.stdout
    assert "Found 2 errors in 2 files" in result.stdout, result.stdout
