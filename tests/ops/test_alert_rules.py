"""deploy/prometheus/alerts.yml: each alert says how urgent it is, what it is about and where its
runbook is (a section of docs/runbook.md), and has unit tests that fire it and keep it quiet,
run by promtool (`make test-alerts`, part of `make test`; here too, so that a failure shows in
the suite)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from tests.ops.promql_usage import ALERTS, REPOSITORY

RULE_TESTS = sorted((REPOSITORY / "deploy" / "prometheus" / "tests").glob("*.yml"))
RUNBOOK = REPOSITORY / "docs" / "runbook.md"


def alerts() -> list[dict]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def anchors(markdown: str) -> set[str]:
    """The anchors of the headings, as GitHub and most renderers make them."""
    found = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_every_alert_has_severity_summary_description_and_runbook():
    rules = alerts()
    assert len(rules) >= 9
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    runbook = anchors(RUNBOOK.read_text())
    for rule in rules:
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        notes = rule["annotations"]
        assert notes["summary"] and notes["description"], name
        assert notes["runbook_url"] == f"docs/runbook.md#{name.lower()}", name
        assert name.lower() in runbook, f"docs/runbook.md has no section {name}"


def test_alerts_per_source_name_their_source():
    for rule in alerts():
        if "by (source)" in rule["expr"]:
            assert "{{ $labels.source }}" in rule["annotations"]["summary"], rule[
                "alert"
            ]


def test_counters_are_summed_over_targets():
    """Each process serves its own machine's counters: a rate of one target alone is a
    share of the traffic."""
    for rule in alerts():
        for counter in re.findall(r"\w+_total", rule["expr"]):
            for call in re.findall(rf"(\w+)\(\s*{counter}", rule["expr"]):
                assert call in {"rate", "increase"}, (rule["alert"], counter)
            uses = re.findall(rf"(?:rate|increase)\({counter}\[", rule["expr"])
            summed = re.findall(
                rf"sum\s*(?:by\s*\([\w, ]+\)\s*)?\(\s*(?:rate|increase)\({counter}\[",
                rule["expr"],
            )
            assert uses and len(summed) == len(uses), (rule["alert"], counter)


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_keeps_it_quiet():
    cases = [
        case
        for path in RULE_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    for rule in alerts():
        mine = [c for c in cases if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"nothing fires {rule['alert']}"
        assert any(not c["exp_alerts"] for c in mine), f"nothing quiets {rule['alert']}"
        for case in mine:
            for alert in case["exp_alerts"]:
                # Exact labels and every annotation, not just that something fired.
                assert alert["exp_labels"]["severity"] == rule["labels"]["severity"]
                assert set(alert["exp_annotations"]) == set(rule["annotations"])


@pytest.mark.slow
def test_promtool_checks_the_rules_and_runs_their_unit_tests():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail(
            "promtool is missing: `make test` installs it (Debian's prometheus package, "
            "scripts/ensure_system_tools.sh)"
        )
    check = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(
        [promtool, "test", "rules", *map(str, RULE_TESTS)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
