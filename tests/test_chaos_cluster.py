"""The cluster chaos run (``make chaos CLUSTER=1``) at its small size, one fault of each kind
across hosts of its own, as part of every test run; and what a run leaves behind when it is
stopped: nothing, whether it tears down itself (SIGTERM) or cannot (SIGKILL, then the next
run's cleanup). The suite runs as root here: without root or ``ip netns`` these tests fail,
saying so, rather than skip."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from chaos import netns
from chaos.cluster import HOSTS, KINDS
from tests.processes import ROOT, wait_until
from tests.test_chaos import assert_invariants_held

pytestmark = pytest.mark.slow


def run_namespaces(pid: int) -> list[str]:
    return [ns for ns in netns.namespaces() if ns.startswith(f"rsc{pid}-")]


@contextmanager
def cluster_run(*args: str) -> Iterator[subprocess.Popen]:
    """``python -m chaos.cluster`` with ``args``; whatever happens, the namespaces of the
    run are gone afterwards (its own teardown, or the cleanup of runs whose process ended)."""
    unusable = netns.usable()
    assert unusable is None, f"the cluster chaos run cannot run here: {unusable}"
    process = subprocess.Popen(
        [sys.executable, "-m", "chaos.cluster", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        netns.stale_cleanup()
        assert run_namespaces(process.pid) == []


def test_cluster_chaos_keeps_every_invariant_across_hosts(tmp_path):
    result = tmp_path / "result.json"
    with cluster_run(
        "--size", "small", "--seed", "31", "--result", str(result)
    ) as process:
        output, _ = process.communicate(timeout=1200)
        # The run tore down what it made, by itself.
        left = run_namespaces(process.pid)
    assert process.returncode == 0, output[-8000:]
    assert left == []
    summary = json.loads(result.read_text())

    # chaos.run's invariants, the contract's answers during partitions, recovery, audit.
    assert_invariants_held(summary, output)
    assert summary["triggered_twice"] == 0
    assert summary["trigger_requests"] > summary["trigger_jobs_checked"] > 0
    # Every probe (one before the faults, one after each) went through the receiver once.
    assert summary["probe_jobs_checked"] == len(KINDS) + 1
    assert 0 < summary["audit_first_checkpoint"] < summary["audit_last_checkpoint"]
    assert summary["audit_verify"].startswith("audit trail OK")

    # One fault of each kind happened, on the hosts the seed chose, and the system was
    # whole again after each.
    faults = summary["fault_details"]
    assert sorted(f["kind"] for f in faults) == sorted(KINDS)
    assert summary["faults_scheduled"] and len(summary["faults"]) == len(KINDS)
    for fault in faults:
        assert fault["error"] == "", fault
        assert fault["recovery_s"] is not None, fault
        assert set(fault["hosts"]) <= set(HOSTS), fault
    # This seed kills the database host: every process of it, PostgreSQL's included.
    assert {"kind": "kill", "hosts": ["db"]}.items() <= next(
        f for f in faults if f["kind"] == "kill"
    ).items()

    hosts = {host["name"]: host for host in summary["hosts"]}
    assert set(hosts) == {"load", *HOSTS}
    assert {host["role"] for host in hosts.values()} == {
        "load",
        "database",
        "broker",
        "web",
        "worker",
        "receiver",
    }
    assert len({host["address"] for host in hosts.values()}) == len(hosts)
    for name in ("requests", "faults", "events", "jobs", "violations"):
        assert f"\n{name:<11} " in output


def test_a_terminated_run_removes_its_hosts():
    with cluster_run("--size", "small", "--seed", "1") as process:
        wait_until(lambda: len(run_namespaces(process.pid)) > len(HOSTS), timeout=120)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=120)
        assert process.returncode == 143, output[-4000:]
        # Gone before the process ended: by its own teardown.
        assert run_namespaces(process.pid) == []
        assert f"rsc{process.pid}-ld" not in netns.ip("link", "show")


def test_the_hosts_of_a_killed_run_are_removed_by_the_next_run_cleanup():
    with cluster_run("--size", "small", "--seed", "1") as process:
        # Killed once its database host runs PostgreSQL: nothing of the run could tear down.
        # Every host is made before any runs; a process seen in the database's namespace
        # before that may be the ``ip -n`` that sets the namespace up, so PostgreSQL's own
        # is waited for.
        db = f"rsc{process.pid}-db"
        wait_until(lambda: len(run_namespaces(process.pid)) > len(HOSTS), timeout=120)
        pids = wait_until(
            lambda: [pid for pid in netns.namespace_pids(db) if _is_postgres(pid)],
            timeout=120,
        )
        process.kill()
        process.communicate(timeout=60)
        left = run_namespaces(process.pid)
        assert len(left) == len(HOSTS) + 1  # and the router's
        removed = netns.stale_cleanup()
        assert set(left) <= set(removed)
        assert f"rsc{process.pid}-ld" in removed
        assert run_namespaces(process.pid) == []
        assert [pid for pid in pids if netns.process_running(pid)] == []


def _is_postgres(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() in {
            "postgres",
            "postmaster",
        }
    except OSError:
        return False  # gone meanwhile
