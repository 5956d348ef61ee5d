import base64
import io
import json
import os
import pwd
import time
from datetime import UTC, datetime

import pytest
import redis
from django.conf import settings
from django.core.management import CommandError, call_command
from standardwebhooks.webhooks import Webhook

from core.relay.loop import Relay
from tests.broker import queued_inbox_event_ids
from tests.webhooks.factories import hold_of, paused_at_of
from webhooks.models import InboxEvent, WebhookSecret, WebhookSource

pytestmark = pytest.mark.django_db


SECRET_A = "first-secret-0123456789abcdef"
SECRET_B = "second-secret-0123456789abcdef"


def run(*args) -> list[str]:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


def test_create_prints_the_generated_secret_once_as_the_last_line():
    lines = run("webhook_source", "create", "lab", "--handler", "research")
    source = WebhookSource.objects.get(slug="lab")
    assert (source.scheme, source.handler, source.is_enabled) == (
        "hmac-sha256",
        "research",
        True,
    )
    secret = lines[-1]
    assert len(secret) >= 32
    assert WebhookSecret.objects.get(source=source).secret == secret
    assert sum(secret in line for line in lines) == 1


def test_create_standard_webhooks_secret_works_with_the_reference_library():
    lines = run(
        "webhook_source",
        "create",
        "sw",
        "--scheme",
        "standard-webhooks",
        "--handler",
        "research",
    )
    secret = lines[-1]
    assert secret.startswith("whsec_")
    now = datetime.now(tz=UTC)
    signature = Webhook(secret).sign("msg_1", now, "{}")
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    Webhook(secret).verify("{}", headers)  # the library accepts its own format
    from webhooks.schemes import scheme_get

    scheme_get("standard-webhooks").verify(
        raw_body=b"{}", headers=headers, secrets=[secret]
    )


def test_create_with_a_given_secret_does_not_print_it():
    lines = run(
        "webhook_source",
        "create",
        "gh",
        "--scheme",
        "github",
        "--handler",
        "github",
        "--secret",
        "given-secret-value",
    )
    assert not any("given-secret-value" in line for line in lines)
    assert WebhookSecret.objects.get().secret == "given-secret-value"


@pytest.mark.parametrize(
    "args",
    [
        ["--scheme", "standard-webhooks", "--secret", "not-whsec"],
        ["--scheme", "standard-webhooks", "--secret", "whsec_%%%"],
    ],
)
def test_create_refuses_an_invalid_standard_webhooks_secret(args):
    with pytest.raises(CommandError):
        run("webhook_source", "create", "sw", "--handler", "research", *args)
    assert not WebhookSource.objects.exists()


def test_create_refuses_a_duplicate_slug_and_a_bad_slug():
    run("webhook_source", "create", "lab", "--handler", "research")
    with pytest.raises(CommandError):
        run("webhook_source", "create", "lab", "--handler", "research")
    with pytest.raises(CommandError):
        run("webhook_source", "create", "not a slug!", "--handler", "research")
    assert WebhookSource.objects.count() == 1


def test_list_shows_sources_and_secret_counts_never_secrets():
    run(
        "webhook_source", "create", "lab", "--handler", "research", "--secret", SECRET_A
    )
    run("webhook_source", "rotate", "lab", "--secret", SECRET_B)
    output = "\n".join(run("webhook_source", "list"))
    assert "lab\thmac-sha256\tresearch\t2\tyes" in output
    assert SECRET_A not in output and SECRET_B not in output


def test_rotate_keeps_the_old_secret_for_the_grace_period():
    run(
        "webhook_source", "create", "lab", "--handler", "research", "--secret", SECRET_A
    )
    lines = run("webhook_source", "rotate", "lab", "--grace-seconds", "600")
    new = lines[-1]
    old_row = WebhookSecret.objects.get(secret=SECRET_A)
    remaining = (old_row.expires_at - datetime.now(tz=UTC)).total_seconds()
    assert 590 < remaining <= 600
    assert WebhookSecret.objects.get(secret=new).expires_at is None


@pytest.mark.parametrize(
    ("scheme", "secret"),
    [
        ("hmac-sha256", "a"),
        ("hmac-sha256", "fifteen-bytes!!"),  # 15 bytes of key material
        ("hmac-sha256", "ééééééé"),  # 7 characters, 14 bytes
        ("github", "short"),
        ("standard-webhooks", "whsec_AAAA"),  # 3 decoded bytes
    ],
)
def test_a_weak_secret_is_refused_at_create_and_at_rotate(scheme, secret):
    with pytest.raises(CommandError, match="key material"):
        run(
            "webhook_source",
            "create",
            "lab",
            "--scheme",
            scheme,
            "--handler",
            "research",
            "--secret",
            secret,
        )
    assert not WebhookSource.objects.exists()
    strong = (
        "whsec_" + base64.b64encode(b"k" * 32).decode()
        if scheme == "standard-webhooks"
        else SECRET_A
    )
    run(
        "webhook_source",
        "create",
        "lab",
        "--scheme",
        scheme,
        "--handler",
        "research",
        "--secret",
        strong,
    )
    with pytest.raises(CommandError, match="key material"):
        run("webhook_source", "rotate", "lab", "--secret", secret)
    assert WebhookSecret.objects.count() == 1


@pytest.mark.parametrize(
    "stray",
    [" ", "\r", "\n", "\t", "\x00", "leading"],
    ids=["space", "cr", "lf", "tab", "nul", "leading-space"],
)
@pytest.mark.parametrize("scheme", ["hmac-sha256", "github", "standard-webhooks"])
def test_a_secret_with_a_stray_character_is_refused_at_create_and_at_rotate(
    scheme, stray, capsys
):
    """A paste's trailing space, a CRLF file's CR: refused with what is wrong, never the
    secret (docs/security.md, "Secrets")."""
    strong = (
        "whsec_" + base64.b64encode(b"k" * 32).decode()
        if scheme == "standard-webhooks"
        else SECRET_A
    )
    given = " " + strong if stray == "leading" else strong + stray
    problem = {" ": "has a trailing space", "leading": "has a leading space"}.get(
        stray, "contains a control character"
    )
    create = ("webhook_source", "create", "lab", "--scheme", scheme)
    with pytest.raises(CommandError) as refused:
        run(*create, "--handler", "research", "--secret", given)
    assert problem in str(refused.value)
    assert strong not in str(refused.value)
    assert not WebhookSource.objects.exists()

    run(*create, "--handler", "research", "--secret", strong)
    with pytest.raises(CommandError) as refused:
        run("webhook_source", "rotate", "lab", "--secret", given)
    assert problem in str(refused.value)
    assert strong not in str(refused.value) + capsys.readouterr().out
    assert WebhookSecret.objects.count() == 1


@pytest.mark.parametrize(
    ("decoded", "accepted"), [(23, False), (24, True), (64, True), (65, False)]
)
def test_a_standard_webhooks_secret_holds_24_to_64_bytes(decoded, accepted):
    secret = "whsec_" + base64.b64encode(b"k" * decoded).decode()
    args = (
        "webhook_source",
        "create",
        "sw",
        "--scheme",
        "standard-webhooks",
        "--handler",
        "research",
        "--secret",
        secret,
    )
    if accepted:
        run(*args)
        assert WebhookSecret.objects.get().secret == secret
    else:
        with pytest.raises(CommandError, match="24 to 64"):
            run(*args)


def test_a_secret_may_come_from_a_file_or_standard_input(tmp_path, monkeypatch):
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET_A + "\n")
    lines = run(
        "webhook_source",
        "create",
        "lab",
        "--handler",
        "research",
        "--secret-file",
        str(secret_file),
    )
    assert WebhookSecret.objects.get().secret == SECRET_A
    assert SECRET_A not in "\n".join(lines)  # given, not generated: never printed
    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET_B + "\n"))
    run("webhook_source", "rotate", "lab", "--secret-file", "-")
    assert set(WebhookSecret.objects.values_list("secret", flat=True)) == {
        SECRET_A,
        SECRET_B,
    }
    with pytest.raises(CommandError, match="not both"):
        run(
            "webhook_source",
            "rotate",
            "lab",
            "--secret",
            SECRET_A,
            "--secret-file",
            str(secret_file),
        )


@pytest.mark.parametrize("grace", ["-1", str(30 * 86400 + 1), str(10**30)])
def test_a_grace_period_beyond_30_days_is_refused(grace):
    run(
        "webhook_source", "create", "lab", "--handler", "research", "--secret", SECRET_A
    )
    with pytest.raises(CommandError, match="grace"):
        run("webhook_source", "rotate", "lab", "--grace-seconds", grace)
    assert WebhookSecret.objects.count() == 1


def test_a_grace_period_of_30_days_is_accepted():
    run(
        "webhook_source", "create", "lab", "--handler", "research", "--secret", SECRET_A
    )
    run("webhook_source", "rotate", "lab", "--grace-seconds", str(30 * 86400))
    assert WebhookSecret.objects.count() == 2


def test_rotate_unknown_source_fails():
    with pytest.raises(CommandError):
        run("webhook_source", "rotate", "nope")


def test_disable_and_enable(client):
    run(
        "webhook_source", "create", "lab", "--handler", "research", "--secret", SECRET_A
    )
    run("webhook_source", "disable", "lab")
    assert (
        client.post("/webhooks/lab/", data=b"{}", content_type="x").status_code == 404
    )
    run("webhook_source", "enable", "lab")
    assert (
        client.post("/webhooks/lab/", data=b"{}", content_type="x").status_code == 401
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scheme", ["hmac-sha256", "standard-webhooks"])
def test_send_test_webhook_against_a_live_server(live_server, scheme):
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete("celery")
    secret = run(
        "webhook_source", "create", "demo", "--scheme", scheme, "--handler", "research"
    )[-1]
    lines = run(
        "send_test_webhook",
        "--url",
        live_server.url,
        "--source",
        "demo",
        # One argument: a generated secret may begin with "-".
        f"--secret={secret}",
        "--scheme",
        scheme,
        "--event-id",
        "evt-cli-1",
    )
    assert lines[0].endswith("-> 202")
    assert json.loads(lines[1]) == {"status": "accepted", "event_id": "evt-cli-1"}
    row = InboxEvent.objects.get()
    assert row.event_type == "research.document.updated"
    assert abs(row.occurred_at.timestamp() - time.time()) < 60
    assert broker.llen("celery") == 0  # the request publishes nothing: the relay does
    assert Relay().run_once(sweep=False) == (1, False)
    assert queued_inbox_event_ids() == [row.pk]
    broker.delete("celery")
    broker.close()
    again = run(
        "send_test_webhook",
        "--url",
        live_server.url,
        "--source",
        "demo",
        "--secret",
        "wrong" if scheme == "hmac-sha256" else "whsec_d3Jvbmc=",
        "--scheme",
        scheme,
    )
    assert again[0].endswith("-> 401")


# --- pause and resume ---------------------------------------------------------------------------


def test_pause_and_resume_are_operator_actions_of_the_os_user(monkeypatch):
    from trail.models import OperatorAction

    # What the invoking user's shell says of itself is not who ran the command.
    monkeypatch.setenv("LOGNAME", "mallory")
    monkeypatch.setenv("USER", "mallory")
    oncall = f"os:{pwd.getpwuid(os.getuid()).pw_name}"
    run(
        "webhook_source", "create", "lab", "--handler", "research", "--secret", SECRET_A
    )
    (line,) = run("webhook_source", "pause", "lab", "--reason", "downstream down")
    assert line.startswith("paused webhook source 'lab'")
    source = WebhookSource.objects.get(slug="lab")
    hold = hold_of(source)
    assert hold.paused_at is not None
    assert (hold.paused_by_name, hold.pause_reason) == (oncall, "downstream down")
    listed = "\n".join(run("webhook_source", "list"))
    assert "lab\thmac-sha256\tresearch\t1\tyes\tyes since " in listed
    assert f"by {oncall}: downstream down" in listed

    (line,) = run("webhook_source", "resume", "lab", "--rate", "12.5")
    assert "at most 12.5 events/s" in line
    hold = hold_of(source)
    assert (hold.paused_at, hold.drain_rate) == (None, 12.5)
    assert "no (draining held events, 12.5/s)" in "\n".join(
        run("webhook_source", "list")
    )
    pause_action, resume_action = OperatorAction.objects.filter(
        action__in=["pause_source", "resume_source"]
    ).order_by("pk")
    assert (pause_action.action, pause_action.actor_name, pause_action.reason) == (
        "pause_source",
        oncall,
        "downstream down",
    )
    assert pause_action.actor is None
    assert pause_action.details["source"] == "lab"
    assert pause_action.details["source_id"] == source.pk
    assert (resume_action.action, resume_action.actor_name) == (
        "resume_source",
        oncall,
    )
    assert resume_action.details["rate"] == 12.5


def test_pausing_twice_or_resuming_an_unpaused_source_fails_and_records_nothing():
    from trail.models import OperatorAction

    run(
        "webhook_source", "create", "lab", "--handler", "research", "--secret", SECRET_A
    )
    with pytest.raises(CommandError, match="not paused"):
        run("webhook_source", "resume", "lab")
    run("webhook_source", "pause", "lab", "--reason", "first")
    with pytest.raises(CommandError, match="already paused"):
        run("webhook_source", "pause", "lab", "--reason", "second")
    assert hold_of(WebhookSource.objects.get(slug="lab")).pause_reason == "first"
    assert OperatorAction.objects.filter(action="pause_source").count() == 1


@pytest.mark.parametrize(
    "args",
    [
        ("pause", "nope", "--reason", "r"),
        ("resume", "nope"),
    ],
)
def test_pause_and_resume_of_an_unknown_source_fail_as_the_other_subcommands(args):
    with pytest.raises(CommandError, match="no webhook source 'nope'"):
        run("webhook_source", *args)


@pytest.mark.parametrize(
    "args",
    [
        ("pause", "lab"),  # no reason
        ("pause", "lab", "--reason", ""),
        ("pause", "lab", "--reason", "   "),
        ("resume", "lab", "--rate", "0"),
        ("resume", "lab", "--rate", "-2"),
        ("resume", "lab", "--rate", "fast"),
        ("resume", "lab", "--rate", "nan"),
    ],
)
def test_pause_needs_a_reason_and_resume_a_rate_above_zero(args):
    from trail.models import OperatorAction

    run(
        "webhook_source", "create", "lab", "--handler", "research", "--secret", SECRET_A
    )
    if args[0] == "resume":
        run("webhook_source", "pause", "lab", "--reason", "down")
    with pytest.raises(CommandError):
        run("webhook_source", *args)
    assert OperatorAction.objects.filter(action="resume_source").count() == 0
    source = WebhookSource.objects.get(slug="lab")
    assert (paused_at_of(source) is not None) == (args[0] == "resume")
