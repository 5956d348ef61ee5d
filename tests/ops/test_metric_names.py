"""Every metric and label that deploy/prometheus/alerts.yml and deploy/grafana/dashboard.json
name exists in /metrics once the product has done its work: a signed delivery, a duplicate, a
409, a refused signature, processed and dead-lettered events, idempotent API requests. A rule
over a misspelt metric or label would never fire, silently: this is where it fails instead."""

from __future__ import annotations

import json

import pytest
import requests

from core.actors import Actor
from deployments.models import DeployTarget
from deployments.targets import deploy_target_save
from tests import processes
from tests.deployments.factories import deployment_body, idempotent_post
from tests.integrations.research.factories import research_event
from tests.ops.promql_usage import (
    Expression,
    alert_expressions,
    dashboard_expressions,
    exported_labels,
    expression_check,
)
from tests.webhooks.factories import (
    InboxEventFactory,
    conflicting_body,
    encode,
    signed_headers,
    signed_post,
)
from webhooks.models import InboxEvent
from webhooks.processing import inbox_event_process
from webhooks.sources import webhook_source_expected_interval_set

# Provided elsewhere, pending: metrics another part of the product exports, with their labels.
# The rules and panels over them are checked against these labels until then. Once /metrics
# exports one of them, the test below fails until it is removed from here.
METRICS_PROVIDED_ELSEWHERE_PENDING: dict[str, frozenset[str]] = {}


def every_expression() -> list[Expression]:
    return alert_expressions() + dashboard_expressions()


def usage_problems(
    exposition: str, pending: dict[str, frozenset[str]] | None = None
) -> list[str]:
    pending = METRICS_PROVIDED_ELSEWHERE_PENDING if pending is None else pending
    exported = exported_labels(exposition)
    problems = [
        f"{name} is exported now: remove it from METRICS_PROVIDED_ELSEWHERE_PENDING"
        for name in pending
        if name in exported
    ]
    for expression in every_expression():
        problems += expression_check(expression, exported, pending=pending).problems
    return problems


@pytest.fixture(scope="module")
def expositions() -> dict[str, str]:
    return {}


@pytest.fixture
def exposition(expositions, request) -> str:
    """/metrics, as the view serves it, after the product did a bit of everything: made by
    the first test of the module that asks for it and kept for the others, which read the
    text and nothing else (two dozen tests, 0.2-0.4 s to make it each)."""
    if "text" not in expositions:
        expositions["text"] = request.getfixturevalue("exposition_made")
    return expositions["text"]


@pytest.fixture
def exposition_made(db, client, source, api) -> str:
    body = research_event()
    assert signed_post(client, source.slug, body).status_code == 202
    assert signed_post(client, source.slug, body).status_code == 200
    stored = InboxEvent.objects.get(event_id=body["event_id"])
    assert signed_post(client, source.slug, conflicting_body(stored)).status_code == 409
    refused = research_event()
    assert (
        signed_post(
            client, source.slug, refused, secret="not-the-secret-0123456789"
        ).status_code
        == 401
    )
    assert inbox_event_process(inbox_event_id=stored.pk).status == "processed"
    rejected = InboxEventFactory(body=research_event(data={"authors": "not a list"}))
    assert inbox_event_process(inbox_event_id=rejected.pk).status == "dead_lettered"
    assert (
        idempotent_post(api, "/api/deployments/", deployment_body()).status_code == 202
    )
    assert (
        idempotent_post(api, "/api/deployments/", deployment_body()).status_code == 200
    )
    webhook_source_expected_interval_set(
        source=source, seconds=3600, actor=Actor.system()
    )
    # A deploy target: its breaker's series.
    deploy_target_save(
        target=DeployTarget(name="argo", executor="external"),
        secret=None,
        actor=Actor.system(),
    )
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.content.decode()


def test_every_metric_and_label_of_the_alerts_and_the_dashboard_is_exported(
    exposition,
):
    problems = usage_problems(exposition)
    assert not problems, "\n".join(problems)


def test_the_rules_and_panels_are_all_read(exposition):
    """The check reads what it should: every alert, every panel's query, the variable."""
    where = {expression.where for expression in every_expression()}
    assert "alert WebhookSourceSilent" in where
    assert "variable source" in where
    assert any(w.startswith("panel 'Processing latency'") for w in where)
    used = set()
    exported = exported_labels(exposition)
    for expression in every_expression():
        used |= expression_check(
            expression, exported, pending=METRICS_PROVIDED_ELSEWHERE_PENDING
        ).metrics
    assert {
        "webhook_requests_total",
        "webhook_signature_failures_total",
        "webhook_duplicates_total",
        "webhook_inconsistent_duplicates_total",
        "webhook_processing_latency_seconds_bucket",
        "webhook_queue_lag_seconds",
        "dead_letter_total",
        "idempotency_requests_total",
        "idempotency_stuck_processing",
        "outbox_lag_seconds",
        "outbox_relays_alive",
        "webhook_source_last_delivery_timestamp_seconds",
        "webhook_source_expected_delivery_interval_seconds",
        "webhook_source_paused_seconds",
        "webhook_source_held_events",
        *METRICS_PROVIDED_ELSEWHERE_PENDING,
    } <= used


BAD_EXPRESSIONS = [
    # A metric that does not exist.
    (
        "sum(increase(dead_letters_total[15m])) > 0",
        "no series named 'dead_letters_total'",
    ),
    # A counter's family name: its series are webhook_requests_total.
    ("sum(rate(webhook_requests[5m]))", "no series named 'webhook_requests'"),
    # A histogram's family name: its series are _bucket, _sum and _count.
    (
        "histogram_quantile(0.9, rate(webhook_processing_latency_seconds[5m]))",
        "no series named 'webhook_processing_latency_seconds'",
    ),
    # The processing latency is not per source.
    (
        "histogram_quantile(0.9, sum by (le, source) "
        "(rate(webhook_processing_latency_seconds_bucket[5m])))",
        "by/without 'source'",
    ),
    # A matcher on a label the metric does not have.
    ('webhook_requests_total{code="500"}', "has no label 'code'"),
    ('dead_letter_total{source="papers"}', "has no label 'source'"),
    # A grouping label the metric does not have.
    ("sum by (reason) (rate(webhook_requests_total[5m]))", "by/without 'reason'"),
    ("sum without (outcome) (outbox_lag_seconds)", "by/without 'outcome'"),
    # A label dropped by the aggregation underneath.
    (
        "sum by (source) (sum by (status) (rate(webhook_requests_total[5m])))",
        "by/without 'source'",
    ),
    # A histogram_quantile whose le was aggregated away.
    (
        "histogram_quantile(0.9, sum(rate("
        "webhook_processing_latency_seconds_bucket[5m])))",
        "without an 'le' label",
    ),
    # Matching on a label one side does not carry.
    (
        "sum by (source) (rate(webhook_requests_total[5m])) / on (source) "
        "sum(rate(webhook_duplicates_total[5m]))",
        "on (source)",
    ),
    (
        "sum by (source) (rate(webhook_requests_total[5m])) * on (source) "
        "group_left (reason) sum by (source) (rate(webhook_requests_total[5m]))",
        "group_left (reason)",
    ),
    # Sides with different labels matched on all of them: never a match.
    (
        "sum by (source) (rate(webhook_requests_total[5m])) "
        "/ sum by (status) (rate(webhook_requests_total[5m]))",
        "different ones",
    ),
    # A dashboard variable reading a label the metric does not have.
    ("label_values(dead_letter_total, source)", "label_values of 'source'"),
]


@pytest.mark.parametrize(("promql", "problem"), BAD_EXPRESSIONS)
def test_a_metric_or_label_that_does_not_exist_is_reported(exposition, promql, problem):
    exported = exported_labels(exposition)
    if promql.startswith("label_values("):
        selector, label = promql[len("label_values(") : -1].split(", ")
        expression = Expression("variable", selector, label_values=label)
    else:
        expression = Expression("test", promql)
    problems = expression_check(expression, exported).problems
    assert any(problem in p for p in problems), problems


GOOD_EXPRESSIONS = [
    "sum(increase(dead_letter_total[15m])) > 0",
    "histogram_quantile(0.9, sum by (le) "
    "(rate(webhook_processing_latency_seconds_bucket[5m])))",
    "sum(rate(webhook_processing_latency_seconds_sum[5m])) "
    "/ sum(rate(webhook_processing_latency_seconds_count[5m]))",
    'sum by (source, status) (rate(webhook_requests_total{status=~"4.."}[5m]))',
    "sum by (source) (rate(webhook_signature_failures_total[5m])) "
    "/ on (source) sum by (source) (rate(webhook_requests_total[5m]))",
    "sum by (operation, outcome) (rate(idempotency_requests_total[$__rate_interval]))",
    'max by (outbox) (outbox_lag_seconds{outbox="inbox", job="retrysafe"})',
    "absent(outbox_relays_alive)",
]


@pytest.mark.parametrize("promql", GOOD_EXPRESSIONS)
def test_expressions_over_what_exists_pass(exposition, promql):
    exported = exported_labels(exposition)
    assert expression_check(Expression("test", promql), exported).problems == []


# A metric no part of the product exports, as a pending one would be named.
FUTURE = {"webhook_source_future_seconds": frozenset({"source"})}


def test_a_pending_metric_is_known_only_through_the_list(exposition):
    exported = exported_labels(exposition)
    expression = Expression("test", "max by (source) (webhook_source_future_seconds)")
    assert expression_check(expression, exported).problems
    assert not expression_check(expression, exported, pending=FUTURE).problems
    wrong_label = Expression("test", 'webhook_source_future_seconds{outbox="x"}')
    assert expression_check(wrong_label, exported, pending=FUTURE).problems


def test_a_pending_metric_once_exported_must_leave_the_list():
    exposition = (
        "# TYPE webhook_source_future_seconds gauge\n"
        'webhook_source_future_seconds{source="papers"} 3.0\n'
    )
    assert (
        "webhook_source_future_seconds is exported now: remove it from "
        "METRICS_PROVIDED_ELSEWHERE_PENDING"
    ) in usage_problems(exposition, pending=FUTURE)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_gunicorn_server_exports_every_metric_and_label_used(tmp_path):
    """The same check against /metrics of gunicorn started as docs/operations.md's "Processes" says
    (its workers' metrics shared in multiprocess mode, as in production)."""
    from tests.webhooks.factories import research_source
    from trail.api_clients import api_client_create

    source = research_source()
    webhook_source_expected_interval_set(
        source=source, seconds=3600, actor=Actor.system()
    )
    _, token = api_client_create(
        name="ci", token="test-token-ci-0123456789abcdef", actor=Actor.system()
    )
    deploy_target_save(
        target=DeployTarget(name="argo", executor="external"),
        secret=None,
        actor=Actor.system(),
    )
    port = processes.free_port()
    env = processes.child_env(
        GUNICORN_CMD_ARGS=f"--bind 127.0.0.1:{port}",
        TMPDIR=str(tmp_path),
        LOG_LEVEL="WARNING",
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server = processes.Process(
        [str(processes.BIN / "gunicorn"), "config.wsgi", "-w", "2"],
        env,
        tmp_path / "gunicorn.log",
    ).start()
    base = f"http://127.0.0.1:{port}"

    def deliver(body: dict, **signing) -> int:
        raw = encode(body)
        headers = signed_headers(raw_body=raw, event_id=body["event_id"], **signing)
        return requests.post(
            f"{base}/webhooks/{source.slug}/", data=raw, headers=headers, timeout=10
        ).status_code

    def trigger() -> int:
        return requests.post(
            f"{base}/api/deployments/",
            data=json.dumps(deployment_body()),
            headers={
                "Authorization": f"Bearer {token}",
                "Idempotency-Key": "key-1",
                "Content-Type": "application/json",
            },
            timeout=10,
        ).status_code

    try:
        processes.wait_http_ok(f"{base}/healthz")
        body = research_event()
        assert deliver(body) == 202
        assert deliver(body) == 200
        assert deliver(dict(body, producer="other")) == 409
        assert deliver(research_event(), secret="not-the-secret-0123456789") == 401
        assert trigger() == 202
        assert trigger() == 200
        exposition = requests.get(f"{base}/metrics", timeout=10).text
    finally:
        server.stop()
    assert "webhook_requests_total_created" not in exposition  # the multiprocess path
    problems = usage_problems(exposition)
    assert not problems, "\n".join(problems)
