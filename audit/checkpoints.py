"""Signed checkpoints of the verifiable log (docs/security.md, "Verifiable log"): C2SP
``tlog-checkpoint`` notes signed with ``AUDIT_SIGNING_KEY``, one stored per sealing round
that grew the tree, and copies kept outside the database as they are made
(``AUDIT_CHECKPOINT_DIR``, ``AUDIT_WITNESS_URL``)."""

from __future__ import annotations

import functools
import logging
import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import IntegrityError, transaction

from core import egress
from deployments.models import secret_fingerprint
from deployments.trigger_urls import url_shown

from . import merkle, note
from .log import log_consistency_proof, log_lock, log_root
from .metrics import AUDIT_CHECKPOINT_PUBLISH_FAILURES, AUDIT_CHECKPOINTS
from .models import LogCheckpoint, LogCheckpointDelivery

logger = logging.getLogger(__name__)

__all__ = [
    "LogInconsistent",
    "checkpoint_latest",
    "checkpoint_latest_note",
    "checkpoint_make",
    "checkpoint_publish",
    "checkpoint_sign",
    "log_signer",
    "log_verifier_key",
]

# How many of the newest checkpoints a round makes sure have their file.
_FILES_CHECKED = 100
WITNESS_USER_AGENT = "retrysafe-audit/1"


class LogInconsistent(RuntimeError):
    """The tree as stored does not extend the last signed checkpoint: someone changed the
    log behind the product's back. Nothing is signed until it is resolved."""


@functools.lru_cache(maxsize=4)
def _signer(skey: str) -> note.Signer:
    return note.signer_parse(skey)


def log_signer() -> note.Signer:
    return _signer(settings.AUDIT_SIGNING_KEY)


def log_verifier_key() -> str:
    """The note verifier key of the log: ``<name>+<hex key id>+<base64(0x01 || key)>``."""
    return log_signer().verifier.vkey


def checkpoint_sign(*, size: int, root: bytes) -> str:
    """The signed note of the checkpoint (origin ``AUDIT_LOG_ORIGIN``, ``size``, ``root``).
    Ed25519 is deterministic: the same size and root always give the same note."""
    text = note.checkpoint_text(origin=settings.AUDIT_LOG_ORIGIN, size=size, root=root)
    return note.note_sign(text=text, signer=log_signer())


def checkpoint_latest() -> LogCheckpoint | None:
    return LogCheckpoint.objects.order_by("-tree_size").first()


def checkpoint_latest_note() -> str:
    """The latest checkpoint's note; before the first one, the signed empty tree."""
    latest = checkpoint_latest()
    if latest is None:
        return checkpoint_sign(size=0, root=merkle.EMPTY_ROOT)
    return latest.note


def _signed(checkpoint: LogCheckpoint) -> note.Checkpoint:
    """What the stored checkpoint's note says, its signature checked: the size and root the
    log committed to, whatever the row's other columns say now."""
    text = note.note_open(note=checkpoint.note, verifier=log_signer().verifier)
    return note.checkpoint_parse(text)


def checkpoint_make() -> LogCheckpoint | None:
    """Signs and stores a checkpoint of the tree as it is, if it grew since the latest one
    (None otherwise). Before signing, proves with the stored tree that it extends the latest
    signed checkpoint (a consistency proof checked against that note's own root): a log must
    never sign a checkpoint inconsistent with one it signed before, so a tree changed behind
    the product's back raises ``LogInconsistent`` instead."""
    with transaction.atomic():
        # Under the lock no leaf is appended between the size and the root read.
        log_lock()
        size, root = log_root()
        latest = checkpoint_latest()
        previous = _signed(latest) if latest is not None else None
        if previous is not None and previous.size >= size:
            if previous.size > size:
                raise LogInconsistent(
                    f"the tree has {size} leaves, the latest checkpoint {previous.size}"
                )
            if previous.root != root:
                raise LogInconsistent(
                    f"the tree's root at size {size} is not the signed checkpoint's"
                )
            return None
        if size == 0:
            return None
        if previous is not None and previous.size > 0:
            try:
                merkle.consistency_verify(
                    size1=previous.size,
                    size2=size,
                    root1=previous.root,
                    root2=root,
                    proof=log_consistency_proof(size1=previous.size, size2=size),
                )
            except merkle.ProofError as exc:
                raise LogInconsistent(
                    f"the tree at size {size} does not extend the checkpoint at size "
                    f"{previous.size}: {exc}"
                ) from None
        try:
            with transaction.atomic():
                checkpoint = LogCheckpoint.objects.create(
                    tree_size=size,
                    root_hash=root,
                    note=checkpoint_sign(size=size, root=root),
                )
        except IntegrityError:
            return None  # made by a concurrent round, for the same size and root
    AUDIT_CHECKPOINTS.inc()
    logger.info("audit.checkpoint_made", extra={"tree_size": size})
    return checkpoint


# --- Copies outside the database ------------------------------------------------------------


def checkpoint_file_name(tree_size: int) -> str:
    return f"checkpoint-{tree_size:012d}"


def _file_write_atomic(path: Path, text: str) -> None:
    """Written whole or not at all: a temporary file in the same folder, synced, renamed."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".checkpoint-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _files_publish(folder: Path) -> int:
    """Writes every recent checkpoint whose file is missing, and ``latest``; returns how many
    files were written."""
    written = 0
    recent = list(
        LogCheckpoint.objects.order_by("-tree_size").values_list("tree_size", "note")[
            :_FILES_CHECKED
        ]
    )
    folder.mkdir(parents=True, exist_ok=True)
    for tree_size, text in reversed(recent):
        path = folder / checkpoint_file_name(tree_size)
        if not path.exists():
            _file_write_atomic(path, text)
            written += 1
    if recent:
        latest = folder / "latest"
        if not latest.exists() or latest.read_text(encoding="utf-8") != recent[0][1]:
            _file_write_atomic(latest, recent[0][1])
    return written


def witness_target(url: str) -> str:
    """How records name the witness: its URL as records show URLs (no user info, no query),
    and a fingerprint of its query when it has one, so that a token there stays out of the
    database and two witnesses that differ only in it are told apart."""
    query = urlsplit(url).query
    shown = url_shown(url)
    return f"{shown} (query {secret_fingerprint(query)})" if query else shown


def _witness_publish(url: str) -> bool:
    """POSTs the latest checkpoint to the witness unless it already accepted it; records the
    acceptance (a 2xx answer). The call is a trigger's (``core.egress``): to a checked
    address, never one in ``DEPLOY_TRIGGER_DENY_NETWORKS``, over within
    ``AUDIT_WITNESS_TIMEOUT_SECONDS`` as a whole; only the status of the answer is read.
    Returns whether the witness holds the latest checkpoint."""
    latest = checkpoint_latest()
    target = witness_target(url)
    if latest is None or latest.deliveries.filter(target=target).exists():
        return True
    timeout = float(settings.AUDIT_WITNESS_TIMEOUT_SECONDS)
    client = egress.client(timeout=timeout, user_agent=WITNESS_USER_AGENT)
    with (
        egress.deadline(timeout),
        client.stream(
            "POST",
            url,
            content=latest.note.encode(),
            headers={"Content-Type": "text/plain; charset=utf-8"},
        ) as response,
    ):
        response.raise_for_status()  # the body is left unread, and closed with it
    LogCheckpointDelivery.objects.get_or_create(checkpoint=latest, target=target)
    return True


def checkpoint_publish() -> dict[str, bool]:
    """Keeps copies of the checkpoints outside the database: a file per checkpoint (and
    ``latest``) in ``AUDIT_CHECKPOINT_DIR``, the latest POSTed to ``AUDIT_WITNESS_URL``.
    Both optional. Runs outside any transaction (an outbound call); a failure is logged and
    counted (``audit_checkpoint_publish_failures_total{target}``), never raised: the next
    round tries again, and sealing never waits for it. Returns, per configured target,
    whether it is up to date."""
    results: dict[str, bool] = {}
    folder = settings.AUDIT_CHECKPOINT_DIR
    if folder:
        try:
            _files_publish(Path(folder))
            results["file"] = True
        except OSError as exc:
            results["file"] = False
            AUDIT_CHECKPOINT_PUBLISH_FAILURES.labels(target="file").inc()
            logger.warning(
                "audit.checkpoint_file_failed",
                extra={"folder": str(folder), "error": type(exc).__name__},
            )
    url = settings.AUDIT_WITNESS_URL
    if url:
        try:
            results["witness"] = _witness_publish(url)
        except (httpx.HTTPError, httpx.InvalidURL, egress.DeniedDestination) as exc:
            results["witness"] = False
            AUDIT_CHECKPOINT_PUBLISH_FAILURES.labels(target="witness").inc()
            status = getattr(getattr(exc, "response", None), "status_code", None)
            logger.warning(
                "audit.checkpoint_witness_failed",
                extra={"error": type(exc).__name__, "status": status},
            )
    return results


def checkpoint_round() -> LogCheckpoint | None:
    """A sealing round's end: a checkpoint if the tree grew, then the copies outside the
    database. A tree that no longer extends the last checkpoint is logged as an error and
    raised after the copies are tried (the task fails visibly at every round until it is
    resolved; nothing inconsistent is ever signed)."""
    try:
        checkpoint = checkpoint_make()
    except LogInconsistent as exc:
        logger.error("audit.log_inconsistent", extra={"problem": str(exc)})
        checkpoint_publish()
        raise
    checkpoint_publish()
    return checkpoint
