"""The fast validation of a deployment's or build's body and its serializer accept and refuse
the same bodies, and give the same validated data: the fast lane answers only what the
serializer would accept, and leaves every refusal (its 422 and its details) to the
serializer. No database: validation reads nothing."""

from __future__ import annotations

import string

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deployments.apis import (
    BuildCreateInputSerializer,
    DeploymentCreateInputSerializer,
    build_input_validate,
    deployment_input_validate,
)
from tests.examples import max_examples

PROPERTY = settings(
    max_examples=max_examples(400),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Texts near every rule's edge: valid shapes, their case, whitespace around them, characters
# each rule refuses (NUL, a surrogate, spaces inside, Unicode whose lower case is ASCII).
_EDGE_CHARS = (
    string.ascii_letters
    + string.digits
    + "/_.-  \t\n\r\x0b\x0c\x00\ud800\u212a\u0130\u00e9\u3000\u2028"
)
_TEXTS = st.one_of(
    st.text(alphabet=_EDGE_CHARS, max_size=12),
    st.text(max_size=8),
    st.from_regex(r"\A[a-z0-9_.-]{1,8}/[A-Za-z0-9_.-]{1,8}\Z"),
    st.from_regex(r"\A[0-9a-fA-F]{5,42}\Z"),
    st.from_regex(r"\A[-a-zA-Z0-9_]{1,66}\Z"),
    st.from_regex(r"\A\s{0,2}[A-Za-z0-9_/-]{1,10}\s{0,2}\Z"),
    st.integers(min_value=-(10**12), max_value=10**50).map(str),
    st.text(alphabet="ab", min_size=195, max_size=260),
)
_VALUES = st.one_of(
    _TEXTS,
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**45), max_value=10**45),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _bodies(members: tuple[str, ...]):
    """Bodies with any subset of ``members`` (and a stranger), each of any value."""
    return st.dictionaries(
        st.sampled_from([*members, "unknown"]), _VALUES, max_size=len(members) + 1
    )


def _serializer_says(serializer_class, body: dict) -> dict | None:
    serializer = serializer_class(data=body)
    if not serializer.is_valid():
        return None
    return dict(serializer.validated_data)


def _same(fast, serializer_class, body: dict) -> None:
    expected = _serializer_says(serializer_class, body)
    assert fast(body) == expected, (body, expected)


_DEPLOYMENT = ("repository", "commit_sha", "environment", "workflow", "triggered_by")
_BUILD = ("repository", "commit_sha", "ref", "workflow", "triggered_by")
_VALID_DEPLOYMENT = {
    "repository": "Acme/Payment-Service",
    "commit_sha": "ABC123def456",
    "environment": "staging",
}


@PROPERTY
@given(body=_bodies(_DEPLOYMENT))
@example(body=_VALID_DEPLOYMENT)
@example(body={**_VALID_DEPLOYMENT, "workflow": "  ", "triggered_by": None})
# Kelvin sign: its lower case is "k"
@example(body={**_VALID_DEPLOYMENT, "repository": "acme/\u212a"})
@example(body={**_VALID_DEPLOYMENT, "commit_sha": " ABC123def456 "})
@example(body={**_VALID_DEPLOYMENT, "commit_sha": 1234567})
@example(body={**_VALID_DEPLOYMENT, "environment": 0})
@example(body={**_VALID_DEPLOYMENT, "repository": "acme/.."})
@example(body={**_VALID_DEPLOYMENT, "commit_sha": True})
@example(body={**_VALID_DEPLOYMENT, "environment": "stag\ning"})
@example(body={**_VALID_DEPLOYMENT, "environment": "staging\n"})
@example(body={**_VALID_DEPLOYMENT, "workflow": "a\x00b"})
@example(body={**_VALID_DEPLOYMENT, "workflow": "\ud800"})
@example(body={**_VALID_DEPLOYMENT, "workflow": 1.5e300})
@example(body={**_VALID_DEPLOYMENT, "triggered_by": "x" * 201})
@example(body={**_VALID_DEPLOYMENT, "environment": "e" * 65})
@example(body={**_VALID_DEPLOYMENT, "repository": "\u0130" * 150 + "/a"})
def test_a_deployment_body_is_accepted_and_refused_as_its_serializer_does(body):
    _same(deployment_input_validate, DeploymentCreateInputSerializer, body)


@PROPERTY
@given(body=_bodies(_BUILD))
@example(body={"repository": "a/b", "commit_sha": "abcdef1", "ref": " refs/x "})
@example(body={"repository": "a/b", "commit_sha": "abcdef1", "ref": "r" * 256})
@example(body={"repository": "a/b", "commit_sha": "abcdef1", "ref": ""})
@example(body={"repository": "a/b", "commit_sha": "abcdef1", "ref": []})
def test_a_build_body_is_accepted_and_refused_as_its_serializer_does(body):
    _same(build_input_validate, BuildCreateInputSerializer, body)


@PROPERTY
@given(
    repository=_TEXTS,
    commit_sha=_TEXTS,
    environment=_TEXTS,
    workflow=st.one_of(_TEXTS, st.none()),
)
def test_near_valid_deployment_bodies_agree_member_by_member(
    repository, commit_sha, environment, workflow
):
    """Every member present, each a text near its rule: the bodies where a difference of
    the two would hide among otherwise valid members."""
    body = {
        "repository": repository,
        "commit_sha": commit_sha,
        "environment": environment,
    }
    if workflow is not None:
        body["workflow"] = workflow
    _same(deployment_input_validate, DeploymentCreateInputSerializer, body)
