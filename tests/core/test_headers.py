"""``EnvironHeaders`` answers every lookup by name as ``request.headers`` does, for the
environs a WSGI server builds (PEP 3333: ``HTTP_`` + the name upper-cased, ``-`` as ``_``)."""

import pytest
from django.http.request import HttpHeaders
from django.test import RequestFactory
from hypothesis import given, settings
from hypothesis import strategies as st

from core.headers import EnvironHeaders, environ_key
from tests.examples import max_examples

# HTTP field names are tokens (RFC 9110, 5.6.2); gunicorn drops names with "_" (they would
# collide with "-" in the environ).
TOKEN_CHARS = (
    "!#$%&'*+-.^`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
names = st.one_of(
    st.text(alphabet=TOKEN_CHARS, min_size=1, max_size=12),
    st.sampled_from(
        [
            "Content-Type",
            "Content-Length",
            "X-Webhook-Signature",
            "webhook-id",
            "X-GitHub-Delivery",
            "X-Request-ID",
            "Host",
        ]
    ),
)
# WSGI values are Latin-1 strings.
values = st.text(alphabet=st.characters(max_codepoint=255), max_size=20)
# What the code looks headers up by: any case, "_" for "-", and names no server sends.
lookups = st.one_of(
    names,
    names.map(str.lower),
    names.map(str.upper),
    names.map(lambda n: n.replace("-", "_")),
    st.text(max_size=8),
)


def _environ(headers: dict[str, str]) -> dict[str, object]:
    """The environ a WSGI server builds for ``headers``, with the entries that are not
    headers beside them."""
    environ: dict[str, object] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/webhooks/s/",
        "SERVER_NAME": "testserver",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.input": object(),
        "wsgi.url_scheme": "http",
    }
    for name, value in headers.items():
        environ[HttpHeaders.to_wsgi_name(name)] = value
    return environ


@settings(max_examples=max_examples(300), deadline=None)
@given(headers=st.dictionaries(names, values, max_size=8), asked=st.lists(lookups))
def test_lookups_answer_as_request_headers_does(headers, asked):
    environ = _environ(headers)
    django_headers = HttpHeaders(environ)
    ours = EnvironHeaders(environ)
    for name in [*asked, *headers]:
        assert ours.get(name) == django_headers.get(name), name
        assert (name in ours) == (name in django_headers), name
        if name in django_headers:
            assert ours[name] == django_headers[name]
        else:
            with pytest.raises(KeyError):
                ours[name]
    assert sorted(ours) == sorted(django_headers)
    assert len(ours) == len(django_headers)


def test_a_request_built_by_django_reads_the_same():
    request = RequestFactory().post(
        "/webhooks/s/",
        data=b"{}",
        content_type="application/json",
        headers={"X-Webhook-Id": "evt-1", "X-Request-ID": "abc"},
    )
    headers = EnvironHeaders(request.META)
    assert headers["x-webhook-id"] == "evt-1"
    assert headers.get("X_REQUEST_ID") == "abc"
    assert headers.get("content-type") == "application/json"
    assert headers.get("X-Missing") is None
    assert headers.get("X-Missing", "") == ""
    assert dict(headers) == dict(request.headers)


def test_names_no_server_stores_are_absent():
    environ = _environ({"X-Key": "v"})
    assert environ_key("X-Ké") == ""
    assert EnvironHeaders(environ).get("X-Ké") is None
    # Environ entries that are not headers are never answered as headers.
    assert EnvironHeaders(environ).get("wsgi.input") is None
    assert "REQUEST_METHOD" not in EnvironHeaders(environ)


def test_names_are_compared_lower_cased_as_django_compares_them():
    # The Kelvin sign lower-cases to an ASCII "k": request.headers finds header "K" by it.
    environ = _environ({"K": "v"})
    assert HttpHeaders(environ).get("\u212a") == "v"
    assert EnvironHeaders(environ).get("\u212a") == "v"
