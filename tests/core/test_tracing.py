"""Tracing's rules without processes (core/tracing.py): off by default (no provider started,
no column written, nothing of OpenTelemetry imported by the hot paths), the settings refused
loudly, the attributes a span may hold (an idempotency key hashed unless the setting asks
for it raw; never a body, a secret, a signature or a token), the links of a batch and of a
replay, and the verifiable log's leaves, which hold no traceparent. Spans are kept by an
in-memory exporter here; tests/core/test_tracing_live.py exports them over OTLP/HTTP from
real processes."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from audit.ledgers import ledger_for_model
from config.settings._helpers import (
    otel_disabled_instrumentations_check,
    otel_endpoint_check,
    otel_key_mode_check,
)
from core.actors import Actor
from core.tracing import MAX_LINKS, idempotency_key_attribute, links_from
from deployments.models import Deployment
from deployments.services.attempts import job_run
from tests import processes
from tests.core.factories import api_client_make, bearer_http
from tests.deployments.factories import deployment_body, idempotent_post
from tests.deployments.fake_github import GITHUB_TOKEN, FakeGitHub
from tests.integrations.research.factories import research_event
from tests.webhooks.factories import RESEARCH_SOURCE, encode, signed_headers
from tests.webhooks.factories import webhook_post as post
from webhooks.models import InboxEvent, ProcessingStatus
from webhooks.processing import inbox_events_process
from webhooks.replay import inbox_events_replay

pytestmark = pytest.mark.django_db

ON = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}


_kept = InMemorySpanExporter()


@pytest.fixture
def spans():
    """Tracing on in this process, every span kept in memory (the process's one SDK
    provider and its one in-memory exporter, made by the first test that asks, emptied for
    each; no exporter to a network)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_tests_keep_spans", False):
        provider.add_span_processor(SimpleSpanProcessor(_kept))
        provider._tests_keep_spans = True  # type: ignore[attr-defined]
    _kept.clear()
    with override_settings(**ON):
        yield _kept
    _kept.clear()


def _request_span(name: str = "request"):
    # What the Django instrumentation's middleware opens around a request in a web process.
    return trace.get_tracer("tests").start_as_current_span(
        name, kind=trace.SpanKind.SERVER
    )


def _traceparent_of(span: ReadableSpan) -> list[str]:
    context = span.get_span_context()
    return ["00", f"{context.trace_id:032x}", f"{context.span_id:016x}"]


def _finished(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [found] = [s for s in exporter.get_finished_spans() if s.name == name]
    return found


def _signed(body: dict) -> tuple[bytes, dict[str, str]]:
    raw = encode(body)
    return raw, signed_headers(raw_body=raw, event_id=body["event_id"])


# --- off by default -----------------------------------------------------------------------


def test_tracing_is_off_by_default_and_no_row_gets_a_context(source, client):
    assert settings.OTEL_EXPORTER_OTLP_ENDPOINT == ""
    body = research_event()
    raw, headers = _signed(body)
    assert post(client, RESEARCH_SOURCE, raw, headers).status_code == 202
    assert InboxEvent.objects.get(event_id=body["event_id"]).traceparent == ""
    _, token = api_client_make()
    answer = idempotent_post(
        bearer_http(token), "/api/deployments/", deployment_body(), "off-1"
    )
    assert answer.status_code == 202
    assert Deployment.objects.get().traceparent == ""


@pytest.mark.slow
def test_off_the_product_imports_and_starts_nothing_of_opentelemetry():
    """In a process of its own: the web's and the worker's paths imported, the start
    asked for, and still no module of OpenTelemetry loaded and no provider set."""
    script = """
import sys, django
django.setup()
import config.wsgi, config.celery_worker
import webhooks.views, webhooks.processing, webhooks.tasks, webhooks.replay
import idempotency.apis, deployments.apis, deployments.tasks, deployments.outbound
import core.relay.loop
from core.tracing import tracing_start, traceparent_current
assert tracing_start(process="worker") is False
assert traceparent_current() == ""
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
assert not loaded, loaded
print("clean")
"""
    env = processes.child_env()
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=processes.ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "clean" in done.stdout


# --- settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["collector:4318", "grpc://collector:4317", "http://", "localhost", "ftp://c/x"],
)
def test_an_endpoint_that_is_not_an_http_url_is_refused(value):
    with pytest.raises(ImproperlyConfigured, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        otel_endpoint_check(value)


def test_an_http_endpoint_is_taken_and_empty_is_off():
    assert otel_endpoint_check("") == ""
    assert otel_endpoint_check("http://collector:4318") == "http://collector:4318"
    assert (
        otel_endpoint_check("https://otel.example/base/")
        == "https://otel.example/base/"
    )
    assert otel_key_mode_check("raw") == "raw"
    with pytest.raises(ImproperlyConfigured, match="OTEL_RECORD_IDEMPOTENCY_KEY"):
        otel_key_mode_check("plain")


@pytest.mark.slow
def test_a_process_with_a_wrong_endpoint_refuses_to_start():
    env = processes.child_env(OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318")
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=processes.ROOT,
    )
    assert done.returncode != 0
    assert "OTEL_EXPORTER_OTLP_ENDPOINT='collector:4318'" in done.stderr


# --- attributes ---------------------------------------------------------------------------


def test_an_idempotency_key_is_a_sha256_prefix_unless_the_setting_asks_for_it_raw():
    key = "deploy-2026-12-06-payment"
    hashed = idempotency_key_attribute(key)
    assert hashed == hashlib.sha256(key.encode()).hexdigest()[:16]
    assert key not in hashed
    with override_settings(OTEL_RECORD_IDEMPOTENCY_KEY="raw"):
        assert idempotency_key_attribute(key) == key


def test_an_idempotent_call_says_its_outcome_and_hashed_key_never_its_body_or_token(
    spans,
):
    _, token = api_client_make()
    http = bearer_http(token)
    body = deployment_body(triggered_by="body-marker-not-an-attribute")
    outcomes = []
    for sent, name in ((body, "first"), (body, "retry"), ({**body, "x": 1}, "other")):
        with _request_span(name):
            outcomes.append(
                idempotent_post(http, "/api/deployments/", sent, "k-1").status_code
            )
    assert outcomes[:2] == [202, 200]
    first, retry = _finished(spans, "first"), _finished(spans, "retry")
    assert first.attributes["idempotency.outcome"] == "created"
    assert first.attributes["idempotency.operation"] == "deployment.create"
    assert first.attributes["idempotency.key"] == idempotency_key_attribute("k-1")
    assert retry.attributes["idempotency.outcome"] == "replayed"
    # The job row keeps the request's context, written with it.
    job = Deployment.objects.get()
    assert job.traceparent.split("-")[:3] == _traceparent_of(first)
    for span in spans.get_finished_spans():
        for value in span.attributes.values():
            assert "body-marker" not in str(value)
            assert token not in str(value)
            assert value != "k-1"

    with override_settings(OTEL_RECORD_IDEMPOTENCY_KEY="raw"), _request_span("raw"):
        idempotent_post(http, "/api/deployments/", body, "k-1")
    assert _finished(spans, "raw").attributes["idempotency.key"] == "k-1"


def test_a_conflicting_key_is_said_on_the_span(spans):
    _, token = api_client_make()
    http = bearer_http(token)
    idempotent_post(http, "/api/deployments/", deployment_body(), "k-2")
    with _request_span("conflict"):
        answer = idempotent_post(
            http, "/api/deployments/", deployment_body(environment="prod"), "k-2"
        )
    assert answer.status_code == 409
    assert _finished(spans, "conflict").attributes["idempotency.outcome"] == "conflict"


def _deliveries(exporter: InMemorySpanExporter, event_id: str) -> list[ReadableSpan]:
    """The server spans of the fast lane for ``event_id``, in the order they ended."""
    return [
        s
        for s in exporter.get_finished_spans()
        if s.kind == trace.SpanKind.SERVER
        and s.attributes.get("webhook.event_id") == event_id
    ]


def test_a_webhook_row_keeps_the_request_context_and_the_span_no_body(
    spans, source, client
):
    body = research_event()
    raw, headers = _signed(body)
    assert post(client, RESEARCH_SOURCE, raw, headers).status_code == 202
    [request] = _deliveries(spans, body["event_id"])
    assert request.name == "POST webhooks/<str:slug>/"
    assert request.parent is None  # the producer sent no traceparent
    assert request.attributes == {
        "http.request.method": "POST",
        "http.route": "webhooks/<str:slug>/",
        "url.path": f"/webhooks/{RESEARCH_SOURCE}/",
        "url.scheme": "http",
        "http.response.status_code": 202,
        "webhook.source": RESEARCH_SOURCE,
        "webhook.event_id": body["event_id"],
        "webhook.outcome": "accepted",
    }
    row = InboxEvent.objects.get(event_id=body["event_id"])
    assert row.traceparent.split("-")[:3] == _traceparent_of(request)

    assert post(client, RESEARCH_SOURCE, raw, headers).status_code == 200
    [_, again] = _deliveries(spans, body["event_id"])
    assert again.attributes["webhook.outcome"] == "duplicate"
    # A duplicate keeps the first request's context.
    row.refresh_from_db()
    assert row.traceparent.split("-")[:3] == _traceparent_of(request)


def test_a_delivery_continues_the_producers_trace(spans, source, client):
    body = research_event()
    raw, headers = _signed(body)
    producer = f"00-{7:032x}-{9:016x}-01"
    response = post(client, RESEARCH_SOURCE, raw, {**headers, "traceparent": producer})
    assert response.status_code == 202
    [request] = _deliveries(spans, body["event_id"])
    assert request.parent.trace_id == 7 and request.parent.span_id == 9
    assert request.get_span_context().trace_id == 7


# --- links --------------------------------------------------------------------------------


def test_a_batch_links_to_its_rows_requests_and_each_handler_is_its_child(
    spans, source, client
):
    requests_ = []
    for _ in range(3):
        body = research_event()
        raw, headers = _signed(body)
        post(client, RESEARCH_SOURCE, raw, headers)
        [delivery] = _deliveries(spans, body["event_id"])
        requests_.append(delivery.get_span_context())
    ids = list(InboxEvent.objects.order_by("pk").values_list("pk", flat=True))

    with trace.get_tracer("tests").start_as_current_span("process batch"):
        outcomes = inbox_events_process(ids=ids, worker="w")
    assert {outcome.status for outcome in outcomes} == {ProcessingStatus.PROCESSED}
    batch = _finished(spans, "process batch")
    assert {link.context.span_id for link in batch.links} == {
        context.span_id for context in requests_
    }
    [handler] = [s for s in spans.get_finished_spans() if s.name == "handle research"]
    assert handler.parent.span_id == batch.get_span_context().span_id
    assert len(handler.links) == 3
    assert handler.attributes["webhook.event_count"] == 3


def test_links_are_bounded_and_skip_what_is_not_a_traceparent(spans):
    stored = [f"00-{n + 1:032x}-{n + 1:016x}-01" for n in range(MAX_LINKS + 10)]
    links = links_from([*stored, "", None, "garbage", stored[0]])
    assert len(links) == MAX_LINKS
    assert links[0].context.trace_id == 1


def test_a_replay_starts_a_new_trace_linked_to_the_original(spans, source, client):
    body = research_event()
    raw, headers = _signed(body)
    post(client, RESEARCH_SOURCE, raw, headers)
    [original] = _deliveries(spans, body["event_id"])
    InboxEvent.objects.update(processing_status=ProcessingStatus.DEAD_LETTERED)

    with _request_span("operator"):
        inbox_events_replay(
            events_queryset=InboxEvent.objects.all(),
            actor=Actor.system(),
            reason="fixed",
        )
    operator = _finished(spans, "operator")
    replay = _finished(spans, "replay inbox events")
    assert replay.parent.span_id == operator.get_span_context().span_id
    assert replay.get_span_context().trace_id != original.get_span_context().trace_id
    assert [link.context.span_id for link in replay.links] == [
        original.get_span_context().span_id
    ]
    row = InboxEvent.objects.get()
    assert row.traceparent.split("-")[:3] == _traceparent_of(replay)


# --- the verifiable log -------------------------------------------------------------------


def test_no_leaf_of_the_log_holds_the_traceparent(source, client):
    body = research_event()
    raw, headers = _signed(body)
    post(client, RESEARCH_SOURCE, raw, headers)
    ledger = ledger_for_model(InboxEvent)
    assert ledger is not None
    assert "traceparent" not in ledger.fields.values()

    def leaf() -> list[dict]:
        return ledger.leaf_fields(InboxEvent.objects.values_list(*ledger.columns()))

    before = leaf()
    InboxEvent.objects.update(traceparent=f"00-{1:032x}-{1:016x}-01")
    assert leaf() == before
    job_ledger = ledger_for_model(Deployment)
    assert job_ledger is not None
    assert "traceparent" not in job_ledger.fields.values()


def test_an_instrumentation_left_out_must_be_one_the_product_starts():
    assert otel_disabled_instrumentations_check(["psycopg", " httpx"]) == [
        "psycopg",
        "httpx",
    ]
    with pytest.raises(
        ImproperlyConfigured, match="OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"
    ):
        otel_disabled_instrumentations_check(["psycopg2"])


def test_every_call_to_githubs_api_carries_the_triggers_traceparent(
    spans, api, settings
):
    with FakeGitHub() as github:
        settings.DEPLOY_EXECUTOR = "github"
        settings.GITHUB_API_URL = github.url
        settings.GITHUB_TOKEN = GITHUB_TOKEN
        body = deployment_body(repository="acme/shop", environment="production")
        response = idempotent_post(api, "/api/deployments/", body, "gh-1")
        job = Deployment.objects.get(public_id=response.json()["deployment_id"])
        with trace.get_tracer("tests").start_as_current_span("process"):
            assert job_run(kind="deployment", public_id=job.public_id, worker="w")
        with github.http.lock:
            sent = [
                request.headers.get("traceparent") for request in github.http.requests
            ]
    trigger = _finished(spans, "trigger github")
    assert trigger.attributes["deployments.outcome"] == "delivered"
    assert sent and all(sent)  # the lookup and the create
    for traceparent in sent:
        assert (
            traceparent.split("-")[1] == f"{trigger.get_span_context().trace_id:032x}"
        )
