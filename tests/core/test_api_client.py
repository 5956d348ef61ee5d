import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from core.models import ApiClient, token_hash

pytestmark = pytest.mark.django_db


def test_create_prints_the_token_once_as_last_line_and_stores_only_its_hash(capsys):
    call_command("api_client", "create", "github-actions")
    out = capsys.readouterr().out.strip().splitlines()
    token = out[-1]
    client = ApiClient.objects.get(name="github-actions")
    assert client.token_hash == token_hash(token)
    assert token not in (client.token_hash, client.token_prefix)
    assert len(token) >= 32


def test_create_with_given_token(capsys):
    call_command("api_client", "create", "tool", "--token", "given-token-0123456789")
    assert capsys.readouterr().out.strip().splitlines()[-1] == "given-token-0123456789"
    assert ApiClient.objects.get(name="tool").token_hash == token_hash(
        "given-token-0123456789"
    )


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Bearer wrong-token",
        "Token test-token-ci-0123456789abcdef",
        "Bearer a b",
    ],
)
def test_api_rejects_missing_or_wrong_bearer_tokens_with_401(api_client_token, header):
    http = APIClient()
    if header is not None:
        http.credentials(HTTP_AUTHORIZATION=header)
    response = http.get("/api/whoami/")
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}
    assert response["WWW-Authenticate"] == "Bearer"


def test_api_accepts_the_bearer_token(api, api_client_token):
    response = api.get("/api/whoami/")
    assert response.status_code == 200
    assert response.json() == {"client": "ci", "role": "ci"}


def test_inactive_client_is_refused(api, api_client_token):
    client, _ = api_client_token
    client.is_active = False
    client.save()
    assert api.get("/api/whoami/").status_code == 401


def test_create_accepts_a_short_given_token_with_a_warning(capsys):
    call_command("api_client", "create", "short", "--token", "tok-1")
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines()[-1] == "tok-1"
    assert "weak" in captured.err
    assert ApiClient.objects.get(name="short").token_hash == token_hash("tok-1")


@pytest.mark.parametrize(
    "stray", [" ", "\r", "\n", "\t", "\x00"], ids=["space", "cr", "lf", "tab", "nul"]
)
def test_create_refuses_a_given_token_with_a_stray_character(capsys, stray):
    """A token its client could never send as given (a header's spaces are trimmed, and an
    HTTP client refuses a control character): refused, never quoted (docs/security.md,
    "Secrets")."""
    token = "given-token-0123456789abcdefABCDEF"
    with pytest.raises(CommandError) as refused:
        call_command("api_client", "create", "tool", "--token", token + stray)
    problem = "has a trailing space" if stray == " " else "control character"
    assert problem in str(refused.value)
    assert "--token" in str(refused.value)
    captured = capsys.readouterr()
    assert token not in str(refused.value) + captured.out + captured.err
    assert not ApiClient.objects.exists()
