"""deploy/grafana/dashboard.json loads as a Grafana dashboard: valid JSON of the current schema,
its data source and source chosen through variables, and a panel for each thing an operator
watches (its metrics and labels exist: tests/ops/test_metric_names.py)."""

from __future__ import annotations

import json
import re

import pytest

from tests.ops.promql_usage import DASHBOARD, dashboard_panels

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Metrics with a source label: their panels follow the dashboard's source variable.
PER_SOURCE = (
    "webhook_requests_total",
    "webhook_signature_failures_total",
    "webhook_source_last_delivery_timestamp_seconds",
    "webhook_source_expected_delivery_interval_seconds",
    "webhook_source_paused_seconds",
    "webhook_source_held_events",
)
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range"}

# Panel title: what its queries must read.
PANELS = {
    "Ingest by status": ["webhook_requests_total", "by (status)"],
    "Signature failures by reason": ["webhook_signature_failures_total", "reason)"],
    "Duplicates and inconsistent duplicates": [
        "webhook_duplicates_total",
        "webhook_inconsistent_duplicates_total",
    ],
    "Processing latency": [
        "histogram_quantile(0.95",
        "webhook_processing_latency_seconds_bucket",
        "by (le)",
    ],
    "Queue lag": ["webhook_queue_lag_seconds"],
    "Relay lag by outbox": ["outbox_lag_seconds", "by (outbox)"],
    "Relays alive": ["outbox_relays_alive"],
    "Dead letters": ["increase(dead_letter_total"],
    "Idempotency outcomes": ["idempotency_requests_total", "outcome)"],
    "Stuck keys": ["idempotency_stuck_processing"],
    "Paused sources": ["webhook_source_paused_seconds"],
    "Held events": ["webhook_source_held_events"],
    "Trigger attempts by outcome": ["deploy_trigger_attempts_total", "outcome)"],
    "Trigger latency": ["deploy_trigger_duration_seconds_bucket", "by (le, executor)"],
    "Time since the last delivery": [
        "webhook_source_last_delivery_timestamp_seconds",
        "webhook_source_expected_delivery_interval_seconds",
    ],
}


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard) -> list[dict]:
    return [p for p in dashboard_panels(dashboard) if p["type"] != "row"]


def test_it_is_a_dashboard_of_the_current_schema(dashboard):
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["title"] and dashboard["uid"] == "retrysafe-overview"
    assert (
        "id" not in dashboard or dashboard["id"] is None
    )  # imported, never overwritten
    ids = [p["id"] for p in dashboard_panels(dashboard)]
    assert len(ids) == len(set(ids))


def test_data_source_and_source_are_variables(dashboard):
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    source = variables["source"]
    assert source["type"] == "query"
    assert source["datasource"] == DATASOURCE
    assert re.fullmatch(r"label_values\(\w+, source\)", source["query"]["query"]), (
        source["query"]
    )
    assert source["definition"] == source["query"]["query"]
    assert source["multi"] and source["includeAll"] and source["allValue"] == ".*"


def test_every_panel_queries_the_chosen_data_source(dashboard):
    for panel in panels(dashboard):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_panels_sit_on_the_grid_without_overlapping(dashboard):
    taken = set()
    for panel in dashboard_panels(dashboard):
        grid = panel["gridPos"]
        assert grid["w"] >= 1 and grid["h"] >= 1 and grid["x"] >= 0 and grid["y"] >= 0
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, panel["title"]
        taken |= cells


def test_each_thing_an_operator_watches_has_its_panel(dashboard):
    by_title = {
        p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels(dashboard)
    }
    for title, needles in PANELS.items():
        assert title in by_title, title
        for needle in needles:
            assert needle in by_title[title], (title, needle)


def test_per_source_queries_follow_the_source_variable(dashboard):
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    for panel in panels(dashboard):
        for target in panel["targets"]:
            expr = target["expr"]
            used = set(re.findall(r"\$\{?(\w+)", expr))
            assert used <= defined | GRAFANA_VARIABLES, (panel["title"], used)
            for metric in PER_SOURCE:
                for selector in re.findall(rf"{metric}(\{{[^}}]*\}})?", expr):
                    assert 'source=~"$source"' in selector, (panel["title"], expr)
