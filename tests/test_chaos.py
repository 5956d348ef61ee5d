"""The chaos suite, at its small size, as part of every test run: workers killed, Redis and
PostgreSQL restarted, beat stopped and two sweeps at once under a mixed load, then every
invariant checked (``make chaos`` runs the medium size)."""

import json
import subprocess
import sys

import pytest

from tests.processes import ROOT

pytestmark = pytest.mark.slow

# Where an accepted event may end: applied, or ignored by the ordering rule. Not dead-lettered,
# not still waiting, not lost.
ACCEPTED_EVENT_ENDS = {"processed", "ignored_out_of_order", "ignored_duplicate_version"}


def test_chaos_suite_keeps_every_invariant():
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
    assert_invariants_held(summary, output)
    # Half the deployments went to a CI/CD receiver failing at random: each one acted on
    # once downstream at most (the invariant above), and the faults really happened.
    assert summary["trigger_jobs_checked"] > 0
    assert summary["triggered_twice"] == 0
    assert summary["trigger_requests"] > summary["trigger_jobs_checked"]
    assert {"status", "drop", "slow"} <= set(summary["trigger_faults"])
    # A quarter went to a receiver refusing everything for the first half of the run: its
    # target's breaker opened and held them, a probe closed it once the receiver was back,
    # and each was acted on once (the invariants above check it is closed at the end and
    # every one that succeeded was acted on).
    down = summary["down_target"]
    assert down["jobs"] > 0
    assert down["breaker"]["open"] >= 1
    assert down["breaker"]["closed"] >= 1
    assert down["statuses"] == {"succeeded": down["jobs"]}

    # The faults really happened: each kind scheduled was injected at least once.
    faults = summary["faults"]
    assert not [name for name in faults if name.startswith("FAILED")], faults
    assert summary["faults_scheduled"]
    for kind in set(summary["faults_scheduled"]):
        assert any(name.startswith(kind) for name in faults), (kind, faults)


def assert_invariants_held(summary: dict, output: str) -> None:
    """Every invariant a chaos run checks held (chaos.run's, which chaos.cluster checks too):
    no 5xx but where the rules allow one, nothing lost, no event applied twice, documents at
    their newest version, one deployment per key, none executed twice; everything came
    back, and every event a producer saw accepted reached its end."""
    assert summary["violation_list"] == []
    assert summary["violations"] == 0
    assert "violations = 0" in output
    assert summary["pending_after_recovery"] == {"inbox": 0, "deployments": 0}
    assert summary["events_checked"] > 0
    assert set(summary["accepted_statuses"]) <= ACCEPTED_EVENT_ENDS
    assert sum(summary["accepted_statuses"].values()) == summary["events_checked"]
    assert summary["documents_checked"] > 0
    assert summary["revisions"] >= summary["documents_checked"]
    assert summary["deployments_checked"] > 0
