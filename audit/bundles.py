"""Evidence bundles (docs/security.md, "Evidence bundles"): entries of the log with
their inclusion proofs against one signed checkpoint, and the raw bodies their leaves name,
in the one JSON object that ``python -m audit.verify_bundle`` checks offline. Which entries
tell a record's story is ``audit.stories``'s business; this module proves whatever it is
given."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping

from .checkpoints import checkpoint_latest, checkpoint_latest_note, log_verifier_key
from .errors import InvalidRange
from .log import log_inclusion_proof
from .models import LogCheckpoint, LogLeaf


def bundle_build(
    *,
    indexes: Iterable[int],
    bodies: Iterable[bytes] = (),
    checkpoint: LogCheckpoint | None = None,
) -> dict:
    """The bundle of the entries at ``indexes`` (in index order, each once), each proved
    against ``checkpoint`` (the latest by default), with ``bodies`` filed under their
    SHA-256. An entry the checkpoint does not cover yet (logged after it) raises
    ``InvalidRange``: the next sealing round's checkpoint will. Before the first checkpoint,
    the bundle carries the signed empty tree."""
    checkpoint = checkpoint or checkpoint_latest()
    size = checkpoint.tree_size if checkpoint is not None else 0
    wanted = sorted(set(indexes))
    late = [index for index in wanted if not 0 <= index < size]
    if late:
        raise InvalidRange(
            f"entries {late[:10]} are not covered by the checkpoint at size {size}"
        )
    leaves: Mapping[int, str] = dict(
        LogLeaf.objects.filter(index__in=wanted).values_list("index", "leaf")
    )
    entries = [
        {
            "index": index,
            "leaf": leaves[index],
            "proof": [
                base64.b64encode(h).decode()
                for h in log_inclusion_proof(index=index, size=size)
            ],
        }
        for index in wanted
    ]
    return {
        "checkpoint": checkpoint.note
        if checkpoint is not None
        else checkpoint_latest_note(),
        "public_key": log_verifier_key(),
        "entries": entries,
        "bodies": {
            hashlib.sha256(body).hexdigest(): base64.b64encode(body).decode()
            for body in bodies
        },
    }
