"""The rules the cluster chaos run (chaos.cluster) judges by, without a cluster: which answers
the contract allows during which fault, that a seed draws one schedule, and that the run's
addresses never overlap a network the machine routes."""

from __future__ import annotations

import ipaddress
import random

import pytest

from chaos import netns
from chaos.cluster import (
    ANSWER_BOUND,
    GRACE,
    HOSTS,
    KINDS,
    SIZES,
    ClusterFault,
    cluster_answers,
    fault_plan,
)
from chaos.run import Outcome, Run

WEBS = {"http://10.213.7.21:8000": "web1", "http://10.213.7.22:8000": "web2"}
WEB1, WEB2 = WEBS


def fault(kind: str, *hosts: str, start: float = 100.0) -> ClusterFault:
    ended = ClusterFault(kind, list(hosts), 10.0, start=start, healed=start + 10)
    ended.served = ended.recovered = start + 12
    return ended


def answer(
    status: int | None,
    host: str = WEB1,
    *,
    at: float = 105.0,
    took: float = 1.0,
    kind: str = "event",
    retry_after: str | None = "1",
) -> Outcome:
    return Outcome(kind, "doc-0001-v1", status, at, host, at - took, retry_after)


def violations(faults: list[ClusterFault], *outcomes: Outcome) -> list[str]:
    run = Run()
    run.outcomes.extend(outcomes)
    return cluster_answers(faults, WEBS)(run)


def test_a_503_is_the_contracts_answer_only_while_a_way_to_the_database_is_impaired():
    cut = [fault("web-db", "web1", "db")]
    assert violations(cut, answer(503, WEB1)) == []
    # The other web host too: a row the cut host's transaction holds locked makes its
    # statement wait until the statement timeout.
    assert violations(cut, answer(503, WEB2)) == []
    # Not any 503 outside a fault, nor a 500 during one.
    assert violations([], answer(503, WEB1)) == ["event doc-0001-v1 to web1: HTTP 503"]
    assert violations(cut, answer(500, WEB1)) == ["event doc-0001-v1 to web1: HTTP 500"]


def test_a_503_needs_its_retry_after_and_must_come_within_the_bound():
    cut = [fault("web-db", "web1", "db")]
    assert violations(cut, answer(503, retry_after=None)) == [
        "event doc-0001-v1 to web1: 503 without a Retry-After in seconds"
    ]
    late = ANSWER_BOUND + 1
    assert violations(cut, answer(503, at=109.0, took=late)) == [
        f"event doc-0001-v1 to web1: HTTP 503 after {late:.1f} s, past {ANSWER_BOUND:g} s"
    ]


@pytest.mark.parametrize("kind", ["isolate", "kill"])
def test_no_answer_only_from_a_host_a_fault_made_unreachable(kind):
    assert violations([fault(kind, "web1")], answer(None, WEB1)) == []
    assert violations([fault(kind, "web1")], answer(None, WEB2)) == [
        "event doc-0001-v1 to web2: no answer (1.0 s)"
    ]
    # The receiver cut from everything: its reports to either web host go unanswered.
    isolated = [fault("isolate", "receiver")]
    assert violations(isolated, answer(None, WEB2, kind="status_sync")) == []
    assert violations(isolated, answer(None, WEB2)) != []


@pytest.mark.parametrize(
    ("cause", "allowed"),
    [
        (("worker-broker", "worker1", "broker"), False),
        (("kill", "broker"), False),
        (("isolate", "broker"), False),
        (("isolate", "receiver"), False),
        (("bandwidth", "broker"), False),
        (("proxy", "worker1", "broker"), False),
        (("kill", "worker1"), False),
        (("kill", "web2"), False),
        (("worker-db", "worker1", "db"), True),
        (("proxy", "worker1", "db"), True),
        (("proxy", "web2", "db"), True),
        (("isolate", "worker2"), True),
        (("kill", "db"), True),
        (("isolate", "db"), True),
        (("bandwidth", "db"), True),
        (("bandwidth", "web1"), True),
    ],
)
def test_which_faults_may_make_a_web_host_answer_503(cause, allowed):
    """Accepting work never waits for the broker: only a fault on some host's way to the
    database may make web1 answer 503, and not a host killed (its transactions end with
    it)."""
    found = violations([fault(*cause)], answer(503, WEB1))
    assert (found == []) is allowed, found


def test_a_faults_effects_may_show_for_a_grace_after_it_is_whole_again():
    cut = [fault("web-db", "web1", "db", start=100.0)]  # whole again at 112
    assert violations(cut, answer(503, at=112 + GRACE - 1, took=1)) == []
    assert violations(cut, answer(503, at=112 + GRACE + 2, took=1)) != []
    assert violations(cut, answer(503, at=98.0, took=1)) != []


def test_a_seed_draws_one_schedule_with_every_kind_of_fault_each_round():
    size = SIZES["medium"]
    plan = fault_plan(random.Random(287), size)
    again = fault_plan(random.Random(287), size)
    assert [(f.kind, f.hosts, f.seconds, f.options) for f in plan] == [
        (f.kind, f.hosts, f.seconds, f.options) for f in again
    ]
    assert sorted(f.kind for f in plan) == sorted(list(KINDS) * size["rounds"])
    for drawn in plan:
        assert set(drawn.hosts) <= set(HOSTS)
        assert "receiver" not in drawn.hosts or drawn.kind in ("isolate", "bandwidth")
    other = fault_plan(random.Random(288), size)
    assert [(f.kind, f.hosts) for f in other] != [(f.kind, f.hosts) for f in plan]


def test_the_run_takes_a_range_no_route_of_the_machine_covers(monkeypatch):
    routed = [
        ipaddress.IPv4Network("192.0.2.0/24"),
        ipaddress.IPv4Network("10.213.0.0/17"),
    ]
    monkeypatch.setattr(netns, "machine_networks", lambda: routed)
    chosen = netns.subnet_choose(run_id=5)
    assert chosen.subnet_of(netns.RANGE)
    assert not any(chosen.overlaps(network) for network in routed)
    with pytest.raises(netns.NetworkError, match="overlaps a route"):
        netns.subnet_choose(5, ipaddress.IPv4Network("10.213.9.0/24"))
    routed.append(ipaddress.IPv4Network("10.0.0.0/8"))
    with pytest.raises(netns.NetworkError, match="choose a free range with --subnet"):
        netns.subnet_choose(run_id=5)
