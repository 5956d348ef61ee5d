"""The log on the embedded default (SQLite, ``make run``'s settings): the same tree, proofs
and checkpoints, in a process of its own with no environment but a folder."""

import base64
import json

import pytest

from audit import merkle, note
from tests.audit import rfc9162_reference as ref
from tests.processes import manage

pytestmark = pytest.mark.slow

SCRIPT = """
import json
from django.test import Client
from audit import merkle, note
from audit.checkpoints import checkpoint_round, log_verifier_key
from audit.leaves import LeafInput, leaf_encode
from audit.log import log_append, log_root_recompute
inputs = [LeafInput(kind="sample_record", record_id=i, fields={"n": i}) for i in range(300)]
for start in range(0, 300, 70):
    log_append(leaves=inputs[start:start + 70])
checkpoint = checkpoint_round()
http = Client(HTTP_HOST="localhost")
proof = http.get("/audit/proof/inclusion", {"index": 123, "size": 300}).json()["hashes"]
consistency = http.get("/audit/proof/consistency", {"from": 77, "to": 300}).json()
print(json.dumps({
    "leaves": [leaf_encode(leaf) for leaf in inputs],
    "checkpoint": http.get("/audit/checkpoint").content.decode(),
    "key": log_verifier_key(),
    "proof": proof,
    "consistency": consistency["hashes"],
    "recomputed_ok": log_root_recompute().ok,
}))
"""


def test_the_log_works_on_the_embedded_sqlite_default(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "APP_VAR_DIR": str(tmp_path),
    }
    manage("migrate", "--noinput", "-v", "0", env=env, check=True)
    result = manage("shell", "-c", SCRIPT, env=env, check=True)
    out = json.loads(result.stdout.strip().splitlines()[-1])
    leaves = [leaf.encode() for leaf in out["leaves"]]
    checkpoint = note.checkpoint_parse(
        note.note_open(note=out["checkpoint"], verifier=note.verifier_parse(out["key"]))
    )
    assert checkpoint.size == 300 and checkpoint.root == ref.mth(leaves)
    proof = [base64.b64decode(h) for h in out["proof"]]
    merkle.inclusion_verify(
        index=123,
        size=300,
        leaf_hash=merkle.leaf_hash(leaves[123]),
        proof=proof,
        root=checkpoint.root,
    )
    consistency = [base64.b64decode(h) for h in out["consistency"]]
    assert ref.roots_from_proof(77, 300, ref.mth(leaves[:77]), consistency)[1] == (
        checkpoint.root
    )
    assert out["recomputed_ok"]
