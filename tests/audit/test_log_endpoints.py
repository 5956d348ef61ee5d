"""The verifiable log's public endpoints (docs/http-api.md, "Verifiable log"): no login, the
latest note as text, the verifier key, proofs as base64 in RFC 9162 order, and every bad
parameter a 400 or 404 with its error code, never a 5xx."""

import base64

import pytest
from django.test import Client

from audit import merkle, note
from audit.checkpoints import checkpoint_make
from audit.leaves import LeafInput, leaf_encode
from audit.log import log_append
from tests.audit import rfc9162_reference as ref

pytestmark = pytest.mark.django_db

SIZE = 23


@pytest.fixture
def leaves():
    inputs = [
        LeafInput(kind="sample_record", record_id=i, fields={"n": i})
        for i in range(SIZE)
    ]
    log_append(leaves=inputs[:10])
    log_append(leaves=inputs[10:])
    return [leaf_encode(leaf).encode() for leaf in inputs]


def hashes(response) -> list[bytes]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return [base64.b64decode(h) for h in response.json()["hashes"]]


def test_the_checkpoint_and_the_key_are_public_text_that_verify_each_other(leaves):
    http = Client()
    checkpoint_make()
    key = http.get("/audit/public-key")
    assert key.status_code == 200 and key["Content-Type"] == "text/plain; charset=utf-8"
    verifier = note.verifier_parse(key.content.decode())
    served = http.get("/audit/checkpoint")
    assert served.status_code == 200
    assert served["Content-Type"] == "text/plain; charset=utf-8"
    checkpoint = note.checkpoint_parse(
        note.note_open(note=served.content.decode(), verifier=verifier)
    )
    assert (checkpoint.size, checkpoint.root) == (SIZE, ref.mth(leaves))


def test_inclusion_proofs_verify_against_the_checkpoint(leaves):
    http = Client()
    for size in (1, 7, 16, SIZE):
        for index in range(size):
            proof = hashes(
                http.get("/audit/proof/inclusion", {"index": index, "size": size})
            )
            assert proof == ref.path(index, leaves[:size])
            assert ref.root_from_path(
                index, size, merkle.leaf_hash(leaves[index]), proof
            ) == ref.mth(leaves[:size])


def test_consistency_proofs_verify_between_sizes(leaves):
    http = Client()
    for size2 in (1, 9, SIZE):
        for size1 in range(1, size2 + 1):
            proof = hashes(
                http.get("/audit/proof/consistency", {"from": size1, "to": size2})
            )
            assert ref.roots_from_proof(
                size1, size2, ref.mth(leaves[:size1]), proof
            ) == (ref.mth(leaves[:size1]), ref.mth(leaves[:size2]))


@pytest.mark.parametrize(
    ("path", "query", "status", "error", "parameter"),
    [
        ("/audit/proof/inclusion", {"size": "3"}, 400, "invalid_parameter", "index"),
        ("/audit/proof/inclusion", {"index": "0"}, 400, "invalid_parameter", "size"),
        (
            "/audit/proof/inclusion",
            {"index": "x", "size": "3"},
            400,
            "invalid_parameter",
            "index",
        ),
        (
            "/audit/proof/inclusion",
            {"index": "-1", "size": "3"},
            400,
            "invalid_parameter",
            "index",
        ),
        (
            "/audit/proof/inclusion",
            {"index": "+1", "size": "3"},
            400,
            "invalid_parameter",
            "index",
        ),
        (
            "/audit/proof/inclusion",
            {"index": "01", "size": "3"},
            400,
            "invalid_parameter",
            "index",
        ),
        (
            "/audit/proof/inclusion",
            {"index": " 1", "size": "3"},
            400,
            "invalid_parameter",
            "index",
        ),
        (
            "/audit/proof/inclusion",
            {"index": "1", "size": "1e3"},
            400,
            "invalid_parameter",
            "size",
        ),
        (
            "/audit/proof/inclusion",
            {"index": "1", "size": "9" * 40},
            400,
            "invalid_parameter",
            "size",
        ),
        (
            "/audit/proof/inclusion",
            {"index": "1", "size": "١٢"},
            400,
            "invalid_parameter",
            "size",
        ),
        (
            "/audit/proof/inclusion",
            {"index": "3", "size": "3"},
            400,
            "invalid_range",
            None,
        ),
        (
            "/audit/proof/inclusion",
            {"index": "0", "size": "0"},
            400,
            "invalid_range",
            None,
        ),
        (
            "/audit/proof/inclusion",
            {"index": "0", "size": "24"},
            404,
            "beyond_tree",
            None,
        ),
        (
            "/audit/proof/inclusion",
            {"index": "0", "size": "9" * 19},
            404,
            "beyond_tree",
            None,
        ),
        ("/audit/proof/consistency", {"to": "3"}, 400, "invalid_parameter", "from"),
        (
            "/audit/proof/consistency",
            {"from": "1", "to": ""},
            400,
            "invalid_parameter",
            "to",
        ),
        (
            "/audit/proof/consistency",
            {"from": "0", "to": "3"},
            400,
            "invalid_range",
            None,
        ),
        (
            "/audit/proof/consistency",
            {"from": "4", "to": "3"},
            400,
            "invalid_range",
            None,
        ),
        (
            "/audit/proof/consistency",
            {"from": "1", "to": "24"},
            404,
            "beyond_tree",
            None,
        ),
    ],
)
def test_bad_parameters_get_their_error_code(
    leaves, path, query, status, error, parameter
):
    response = Client().get(path, query)
    assert response.status_code == status
    body = response.json()
    assert body["error"] == error
    if parameter:
        assert body["parameter"] == parameter
    if error == "beyond_tree":
        assert body["tree_size"] == SIZE


def test_equal_sizes_have_an_empty_consistency_proof(leaves):
    assert hashes(Client().get("/audit/proof/consistency", {"from": 5, "to": 5})) == []


def test_only_get_is_answered():
    for path in ("/audit/checkpoint", "/audit/public-key", "/audit/proof/inclusion"):
        assert Client().post(path, b"", content_type="text/plain").status_code == 405
