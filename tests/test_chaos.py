"""The chaos suite, at its small size, as part of every test run: workers killed, Redis and
PostgreSQL restarted, beat stopped and two sweeps at once under a mixed load, then every
invariant checked (``make chaos`` runs the medium size)."""

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow


def test_chaos_suite_finds_no_violation():
    result = subprocess.run(
        [sys.executable, "-m", "chaos.run", "--size", "small", "--seed", "7"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    summary = json.loads((ROOT / "var" / "chaos" / "result.json").read_text())
    assert summary["violations"] == 0
    assert summary["faults_injected"] == 8
    assert not [f for f in summary["faults"] if f.startswith("FAILED")]
    assert summary["events_checked"] > 0
    assert summary["deployments_checked"] > 0
    assert "violations = 0" in output
