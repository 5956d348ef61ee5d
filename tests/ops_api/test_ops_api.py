"""The operator API's replays, bulk replay jobs, sources, mismatches and dead letters
(docs/http-api.md, "Operator API"): each action through the service the console uses, its
operator action recorded with the API client as actor, every POST under the
Idempotency-Key contract, and every role answered as its endpoints say."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import ApiRole
from idempotency.models import IdempotencyRecord
from tests.core.factories import api_client_make, bearer_http, role_http
from tests.deployments.factories import idempotent_post as post
from tests.webhooks.factories import (
    DeadLetteredEventFactory,
    FingerprintMismatchFactory,
    InboxEventFactory,
    WebhookSecretFactory,
    WebhookSourceFactory,
)
from trail.models import OperatorAction
from webhooks.models import BulkReplayJob, InboxEvent, WebhookSecret

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops():
    """The HTTP client of an operator API client, ``ops-bot``."""
    _, token = api_client_make(name="ops-bot", role="operator")
    return bearer_http(token)


def actions(name: str) -> list[OperatorAction]:
    return list(OperatorAction.objects.filter(action=name).order_by("pk"))


# --- roles ----------------------------------------------------------------------------

READS = [
    "/api/ops/sources/",
    "/api/ops/dead-letters/",
    "/api/ops/mismatches/",
    "/api/ops/bulk-replays/",
]


@pytest.mark.parametrize("role", [r.value for r in ApiRole])
def test_reads_are_for_operators_and_auditors(role):
    http = role_http(role)
    for route in READS:
        response = http.get(route)
        expected = 200 if role in ("operator", "auditor") else 403
        assert response.status_code == expected, (route, response.content)


@pytest.mark.parametrize("role", ["auditor", "ci", "producer"])
def test_every_action_is_refused_to_all_but_operators(role):
    source = WebhookSourceFactory(slug="refused")
    dead = DeadLetteredEventFactory(source=source)
    mismatch = FingerprintMismatchFactory()
    job = BulkReplayJob.objects.create(reason="r", dry_run_count=1)
    http = role_http(role)
    bodies = {
        "/api/ops/replays/": {
            "source": "refused",
            "event_ids": [dead.event_id],
            "reason": "r",
        },
        "/api/ops/bulk-replays/": {"mode": "plan"},
        f"/api/ops/bulk-replays/{job.pk}/cancel/": {},
        "/api/ops/sources/refused/pause/": {"reason": "r"},
        "/api/ops/sources/refused/resume/": {},
        "/api/ops/sources/refused/rotate/": {},
        "/api/ops/sources/refused/revoke-previous/": {},
        f"/api/ops/mismatches/{mismatch.pk}/investigate/": {"note": "n"},
    }
    for route, body in bodies.items():
        response = post(http, route, body)
        assert response.status_code == 403, (route, response.content)
        assert response.json() == {"error": "forbidden"}
    assert OperatorAction.objects.exclude(action="create_api_client").count() == 0
    assert IdempotencyRecord.objects.count() == 0
    dead.refresh_from_db()
    assert dead.processing_status == "dead_lettered"


# --- replay ---------------------------------------------------------------------------


def test_replay_by_ids_moves_the_dead_letters_and_records_the_client(ops):
    source = WebhookSourceFactory(slug="acme")
    dead = DeadLetteredEventFactory.create_batch(3, source=source)
    done = InboxEventFactory(source=source, processing_status="processed")
    ids = [e.event_id for e in dead] + [done.event_id, "no-such-event"]

    response = post(
        ops,
        "/api/ops/replays/",
        {"source": "acme", "event_ids": ids, "reason": "outage"},
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["replayed"] == 3
    assert body["skipped"] == 2
    assert sorted(body["replayed_event_ids"]) == sorted(e.event_id for e in dead)
    assert set(
        InboxEvent.objects.filter(pk__in=[e.pk for e in dead]).values_list(
            "processing_status", flat=True
        )
    ) == {"received"}
    [action] = actions("replay")
    assert action.actor_name == "api:ops-bot"
    assert action.reason == "outage"
    assert sorted(action.event_ids) == sorted(e.pk for e in dead)
    assert body["operator_action_id"] == action.pk

    # The same key and body: the first answer, nothing replayed again.
    retry = post(
        ops,
        "/api/ops/replays/",
        {"source": "acme", "event_ids": ids, "reason": "outage"},
    )
    assert retry.status_code == 200
    assert retry.content == response.content
    assert retry["Idempotent-Replayed"] == "true"
    assert len(actions("replay")) == 1

    # The same key, other events: 409 naming what differs.
    conflict = post(
        ops,
        "/api/ops/replays/",
        {"source": "acme", "event_ids": ids[:1], "reason": "outage"},
    )
    assert conflict.status_code == 409
    assert conflict.json() == {
        "error": "idempotency_key_reused",
        "differing_fields": ["event_ids"],
    }


def test_replay_errors_are_the_documented_ones_and_record_nothing(ops):
    WebhookSourceFactory(slug="acme")
    nothing = post(
        ops,
        "/api/ops/replays/",
        {"source": "acme", "event_ids": ["missing"], "reason": "r"},
        key="k-nothing",
    )
    assert nothing.status_code == 409
    assert nothing.json()["error"] == "nothing_to_replay"
    unknown = post(
        ops,
        "/api/ops/replays/",
        {"source": "nowhere", "event_ids": ["e"], "reason": "r"},
        key="k-unknown",
    )
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "unknown_source"
    for body in (
        {"source": "acme", "event_ids": [], "reason": "r"},
        {"source": "acme", "event_ids": "e-1", "reason": "r"},
        {"source": "acme", "event_ids": [1], "reason": "r"},
        {"source": "acme", "event_ids": ["e"] * 1001, "reason": "r"},
        {"source": "acme", "event_ids": ["e"]},
        {"source": 5, "event_ids": ["e"], "reason": "r"},
    ):
        response = post(ops, "/api/ops/replays/", body, key="k-bad")
        assert response.status_code == 422, body
        assert response.json()["error"] == "invalid_payload"
    assert post(ops, "/api/ops/replays/", {}, key=None).status_code == 400
    bad_json = ops.post(
        "/api/ops/replays/",
        data=b"{not json",
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k-json",
    )
    assert bad_json.status_code == 400
    assert bad_json.json()["error"] == "invalid_json"
    assert not actions("replay")
    assert IdempotencyRecord.objects.count() == 0


def test_a_rejected_dead_letter_needs_confirm_repeats(ops):
    source = WebhookSourceFactory(slug="acme")
    rejected = DeadLetteredEventFactory(source=source, dead_letter_cause="rejected")
    body = {"source": "acme", "event_ids": [rejected.event_id], "reason": "fixed"}
    refused = post(ops, "/api/ops/replays/", body, key="k1")
    assert refused.status_code == 409
    assert refused.json()["error"] == "replay_repeats_unconfirmed"
    confirmed = post(
        ops, "/api/ops/replays/", {**body, "confirm_repeats": True}, key="k2"
    )
    assert confirmed.status_code == 200
    assert confirmed.json()["replayed"] == 1


# --- bulk replay ----------------------------------------------------------------------


def test_a_plan_counts_what_an_execute_would_do_and_writes_no_job(ops):
    source = WebhookSourceFactory(slug="acme")
    DeadLetteredEventFactory.create_batch(4, source=source)
    expired = DeadLetteredEventFactory.create_batch(2, source=source)
    InboxEvent.objects.filter(pk__in=[e.pk for e in expired]).update(
        raw_body=None, body_purged_at=timezone.now()
    )
    InboxEventFactory.create_batch(3, source=source, processing_status="processed")
    InboxEventFactory(source=source, processing_status="received")
    old = DeadLetteredEventFactory(source=source)
    InboxEvent.objects.filter(pk=old.pk).update(
        received_at=timezone.now() - timedelta(days=30)
    )
    DeadLetteredEventFactory(source=WebhookSourceFactory(slug="other"))

    response = post(ops, "/api/ops/bulk-replays/", {"mode": "plan", "source": "acme"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["mode"] == "plan"
    assert (
        body["matched"],
        body["replayable"],
        body["body_expired"],
        body["already_processed"],
        body["capped"],
    ) == (10, 4, 2, 3, False)
    # The default window: the last 7 days, frozen in the answer.
    assert body["filter"]["source"] == "acme"
    assert body["filter"]["status"] == "dead_lettered"
    assert body["filter"]["since"] is not None and body["filter"]["until"] is not None
    assert BulkReplayJob.objects.count() == 0
    assert not OperatorAction.objects.exclude(action="create_api_client").exists()


def test_execute_creates_and_starts_one_job_whatever_the_retries(
    ops, django_capture_on_commit_callbacks
):
    source = WebhookSourceFactory(slug="acme")
    dead = DeadLetteredEventFactory.create_batch(5, source=source)
    body = {"mode": "execute", "source": "acme", "rate": 10, "reason": "outage over"}

    with django_capture_on_commit_callbacks(execute=False):
        first = post(ops, "/api/ops/bulk-replays/", body)
        retries = [post(ops, "/api/ops/bulk-replays/", body) for _ in range(3)]

    assert first.status_code == 202, first.content
    job = BulkReplayJob.objects.get()
    answer = first.json()
    assert answer["bulk_replay_id"] == job.pk
    assert first["Location"] == f"/api/ops/bulk-replays/{job.pk}/"
    assert answer["state"] == "queued"
    assert answer["rate"] == 10
    assert answer["dry_run_count"] == 5
    assert answer["created_by"] == "api:ops-bot"
    assert answer["filter"]["until"] is not None
    assert {r.status_code for r in retries} == {200}
    assert {r.content for r in retries} == {first.content}
    assert [a.actor_name for a in actions("start_bulk_replay")] == ["api:ops-bot"]
    # Frozen: a dead letter that arrives after the job was made is not the job's.
    late = DeadLetteredEventFactory(source=source)
    from webhooks.bulk_replay import _job_queryset

    assert sorted(_job_queryset(job).values_list("pk", flat=True)) == sorted(
        e.pk for e in dead
    )
    assert late.pk not in _job_queryset(job).values_list("pk", flat=True)

    reused = post(ops, "/api/ops/bulk-replays/", {**body, "rate": 20})
    assert reused.status_code == 409
    assert reused.json()["differing_fields"] == ["rate"]


def test_execute_needs_a_reason_and_a_match(ops):
    WebhookSourceFactory(slug="acme")
    no_reason = post(ops, "/api/ops/bulk-replays/", {"mode": "execute"}, key="a")
    assert no_reason.status_code == 422
    assert "reason" in no_reason.json()["details"]
    nothing = post(
        ops,
        "/api/ops/bulk-replays/",
        {"mode": "execute", "source": "acme", "reason": "r"},
        key="b",
    )
    assert nothing.status_code == 409
    assert nothing.json()["error"] == "nothing_to_replay"
    assert BulkReplayJob.objects.count() == 0
    for bad in (
        {"mode": "later"},
        {"mode": "plan", "rate": 0},
        {"mode": "plan", "rate": "fast"},
        {"mode": "plan", "status": "processed"},
        {"mode": "plan", "since": "yesterday"},
    ):
        response = post(ops, "/api/ops/bulk-replays/", bad, key="c")
        assert response.status_code == 422, bad
    assert IdempotencyRecord.objects.count() == 0
    # A window that ends before it starts holds nothing.
    empty = post(
        ops,
        "/api/ops/bulk-replays/",
        {
            "mode": "plan",
            "since": "2026-02-01T00:00:00Z",
            "until": "2026-01-01T00:00:00Z",
        },
        key="d",
    )
    assert (empty.status_code, empty.json()["matched"]) == (200, 0)


def test_pause_resume_cancel_through_the_api(ops, django_capture_on_commit_callbacks):
    source = WebhookSourceFactory(slug="acme")
    DeadLetteredEventFactory.create_batch(3, source=source)
    with django_capture_on_commit_callbacks(execute=False):
        created = post(
            ops,
            "/api/ops/bulk-replays/",
            {"mode": "execute", "source": "acme", "reason": "r"},
            key="create",
        )
        job_id = created.json()["bulk_replay_id"]
        paused = post(
            ops, f"/api/ops/bulk-replays/{job_id}/pause/", {"reason": "busy"}, key="p"
        )
        assert paused.status_code == 200, paused.content
        assert paused.json()["state"] == "paused"
        assert set(paused.json()["controls"]) == {"cancel", "resume"}
        again = post(
            ops, f"/api/ops/bulk-replays/{job_id}/pause/", {"reason": "busy"}, key="p2"
        )
        assert again.status_code == 409
        assert again.json()["error"] == "bulk_replay_job_not_cancellable"
        resumed = post(
            ops, f"/api/ops/bulk-replays/{job_id}/resume/", {"rate": 5}, key="r"
        )
        assert resumed.status_code == 200, resumed.content
        assert (resumed.json()["state"], resumed.json()["rate"]) == ("queued", 5)
        cancelled = post(
            ops, f"/api/ops/bulk-replays/{job_id}/cancel/", {"reason": "no"}, key="c"
        )
        assert cancelled.json()["state"] == "cancelled"
    # The same key on another control of the same job is a reused key.
    reused = post(
        ops, f"/api/ops/bulk-replays/{job_id}/cancel/", {"reason": "busy"}, key="p"
    )
    assert reused.status_code == 409
    assert reused.json()["differing_fields"] == ["control"]
    assert [
        a.action
        for a in OperatorAction.objects.filter(bulk_job_id=job_id).order_by("pk")
    ] == [
        "start_bulk_replay",
        "pause_bulk_replay",
        "resume_bulk_replay",
        "cancel_bulk_replay",
    ]
    assert (
        post(ops, "/api/ops/bulk-replays/999999/pause/", {}, key="x").status_code == 404
    )
    assert (
        post(ops, f"/api/ops/bulk-replays/{job_id}/explode/", {}, key="y").status_code
        == 404
    )
    progress = role_http("auditor").get(f"/api/ops/bulk-replays/{job_id}/")
    assert progress.status_code == 200
    assert progress.json()["state"] == "cancelled"
    assert {
        "done",
        "failed",
        "skipped",
        "rate",
        "rate_measured",
    } <= progress.json().keys()


# --- sources --------------------------------------------------------------------------


def test_pause_and_resume_a_source(ops):
    WebhookSourceFactory(slug="acme")
    paused = post(
        ops, "/api/ops/sources/acme/pause/", {"reason": "maintenance"}, key="p"
    )
    assert paused.status_code == 200, paused.content
    assert (paused.json()["paused"], paused.json()["pause_reason"]) == (
        True,
        "maintenance",
    )
    assert paused.json()["paused_by"] == "api:ops-bot"
    twice = post(ops, "/api/ops/sources/acme/pause/", {"reason": "again"}, key="p2")
    assert twice.status_code == 409
    assert twice.json()["error"] == "source_already_paused"
    resumed = post(ops, "/api/ops/sources/acme/resume/", {"rate": 50}, key="r")
    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["paused"] is False
    assert [a.actor_name for a in actions("pause_source")] == ["api:ops-bot"]
    assert [a.actor_name for a in actions("resume_source")] == ["api:ops-bot"]
    assert (
        post(
            ops, "/api/ops/sources/nowhere/pause/", {"reason": "x"}, key="n"
        ).status_code
        == 404
    )
    blank = post(ops, "/api/ops/sources/acme/pause/", {"reason": ""}, key="b")
    assert blank.status_code == 422


def test_rotate_answers_the_secret_once_and_refuses_an_open_window(ops):
    source = WebhookSourceFactory(slug="acme")
    first = post(
        ops, "/api/ops/sources/acme/rotate/", {"grace_seconds": 3600}, key="r1"
    )
    assert first.status_code == 200, first.content
    secret = first.json()["secret"]
    assert secret and len(secret) >= 16
    assert WebhookSecret.objects.filter(source=source, secret=secret).exists()
    assert first.json()["previous_valid_until"] is not None
    # The key's record never holds it: the replay answers null.
    record = IdempotencyRecord.objects.get(operation_type="ops.source.rotate")
    assert secret.encode() not in bytes(record.response_body)
    replay = post(
        ops, "/api/ops/sources/acme/rotate/", {"grace_seconds": 3600}, key="r1"
    )
    assert replay.status_code == 200
    assert replay.json()["secret"] is None
    assert replay["Idempotent-Replayed"] == "true"
    assert WebhookSecret.objects.filter(source=source).count() == 2

    # A second rotation while the first one's window is open: refused unless forced.
    refused = post(ops, "/api/ops/sources/acme/rotate/", {}, key="r2")
    assert refused.status_code == 409
    assert refused.json()["error"] == "rotation_in_progress"
    assert refused.json()["previous_valid_until"]
    forced = post(ops, "/api/ops/sources/acme/rotate/", {"force": True}, key="r3")
    assert forced.status_code == 200
    assert len(actions("rotate_secret")) == 2
    assert all(a.actor_name == "api:ops-bot" for a in actions("rotate_secret"))
    assert all(secret not in json.dumps(a.details) for a in actions("rotate_secret"))

    too_long = post(
        ops, "/api/ops/sources/acme/rotate/", {"grace_seconds": 31 * 86400}, key="r4"
    )
    assert too_long.status_code == 422
    weak = post(
        ops,
        "/api/ops/sources/acme/rotate/",
        {"secret": "short", "force": True},
        key="r5",
    )
    assert weak.status_code == 422


def test_revoke_previous_ends_the_grace_now(ops):
    source = WebhookSourceFactory(slug="acme")
    nothing = post(ops, "/api/ops/sources/acme/revoke-previous/", {}, key="v0")
    assert nothing.status_code == 409
    assert nothing.json()["error"] == "nothing_to_revoke"
    WebhookSecretFactory(source=source, expires_at=timezone.now() + timedelta(hours=5))
    revoked = post(
        ops, "/api/ops/sources/acme/revoke-previous/", {"reason": "leak"}, key="v1"
    )
    assert revoked.status_code == 200, revoked.content
    assert revoked.json()["revoked"] == 1
    assert revoked.json()["previous_valid_until"] is None
    assert not WebhookSecret.objects.filter(
        source=source, expires_at__gt=timezone.now()
    ).exists()
    [action] = actions("revoke_previous_secrets")
    assert (action.actor_name, action.details["revoked"]) == ("api:ops-bot", 1)


def test_sources_are_read_without_a_secret():
    source = WebhookSourceFactory(slug="acme", secret="a-very-secret-secret-0123456789")
    http = role_http("auditor")
    listed = http.get("/api/ops/sources/")
    assert listed.status_code == 200
    assert "a-very-secret-secret" not in listed.content.decode()
    one = http.get("/api/ops/sources/acme/")
    assert one.json()["slug"] == source.slug
    assert one.json()["secret_count"] == 1
    assert http.get("/api/ops/sources/nowhere/").status_code == 404


# --- mismatches and dead letters ------------------------------------------------------


def test_mismatches_listed_read_and_investigated(ops):
    mismatch = FingerprintMismatchFactory()
    auditor = role_http("auditor")
    listed = auditor.get("/api/ops/mismatches/?investigated=false")
    assert [m["mismatch_id"] for m in listed.json()["results"]] == [mismatch.pk]
    detail = auditor.get(f"/api/ops/mismatches/{mismatch.pk}/").json()
    assert detail["original_fingerprint"] != detail["conflicting_fingerprint"]
    assert json.loads(detail["conflicting_body"]) == json.loads(
        bytes(mismatch.raw_body)
    )
    assert json.loads(detail["original_body"])["event_id"] == mismatch.event.event_id

    marked = post(
        ops, f"/api/ops/mismatches/{mismatch.pk}/investigate/", {"note": "producer bug"}
    )
    assert marked.status_code == 200, marked.content
    assert marked.json()["investigated"] is True
    assert marked.json()["investigation_note"] == "producer bug"
    assert (
        auditor.get("/api/ops/mismatches/?investigated=false").json()["results"] == []
    )
    [action] = actions("mark_investigated")
    assert action.actor_name == "api:ops-bot"
    assert (
        post(
            ops, "/api/ops/mismatches/999999/investigate/", {"note": "n"}, key="z"
        ).status_code
        == 404
    )
    assert auditor.get("/api/ops/mismatches/?investigated=maybe").status_code == 422


def test_the_dead_letter_queue_as_the_console_lists_it():
    source = WebhookSourceFactory(slug="acme")
    dead = DeadLetteredEventFactory.create_batch(2, source=source)
    DeadLetteredEventFactory(source=WebhookSourceFactory(slug="other"))
    InboxEventFactory(source=source, processing_status="processed")
    http = role_http("operator")
    page = http.get("/api/ops/dead-letters/?source=acme").json()
    assert sorted(r["event_id"] for r in page["results"]) == sorted(
        e.event_id for e in dead
    )
    assert {r["dead_letter_cause"] for r in page["results"]} == {"exhausted"}
    assert len(http.get("/api/ops/dead-letters/").json()["results"]) == 3
    future = (timezone.now() + timedelta(days=1)).isoformat()
    assert http.get("/api/ops/dead-letters/", {"since": future}).json()["results"] == []
    assert http.get("/api/ops/dead-letters/?since=soon").status_code == 422
