"""Signed checkpoints (audit/checkpoints.py): one per round that grew the log, never one that
contradicts the last signed, and copies outside the database (a file per checkpoint, a
witness over real HTTP) that never hold sealing up."""

import logging
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler

import pytest
from django.db import connection
from prometheus_client import REGISTRY

from audit import merkle, note
from audit.checkpoints import (
    LogInconsistent,
    checkpoint_file_name,
    checkpoint_latest_note,
    checkpoint_make,
    checkpoint_publish,
    checkpoint_round,
    log_verifier_key,
)
from audit.leaves import LeafInput
from audit.log import log_append, log_root
from audit.models import LogCheckpoint, LogCheckpointDelivery, LogLeaf, LogNode
from audit.tasks import seal_inbox_task
from tests.deployments.trickler import LATE_SECONDS, Trickler
from tests.http_double import HttpDouble, QuietServer, Reply

pytestmark = pytest.mark.django_db


def append(start: int, count: int):
    return log_append(
        leaves=[
            LeafInput(kind="sample_record", record_id=start + i) for i in range(count)
        ]
    )


def opened(text: str) -> note.Checkpoint:
    verifier = note.verifier_parse(log_verifier_key())
    return note.checkpoint_parse(note.note_open(note=text, verifier=verifier))


def failures(target: str) -> float:
    value = REGISTRY.get_sample_value(
        "audit_checkpoint_publish_failures_total", {"target": target}
    )
    return value or 0.0


def test_before_any_leaf_the_checkpoint_is_the_signed_empty_tree(settings):
    assert checkpoint_make() is None
    checkpoint = opened(checkpoint_latest_note())
    assert checkpoint == note.Checkpoint(
        origin=settings.AUDIT_LOG_ORIGIN, size=0, root=merkle.EMPTY_ROOT
    )


def test_a_round_that_grew_the_log_signs_one_checkpoint_of_it(settings):
    made = append(0, 10)
    checkpoint = checkpoint_make()
    assert checkpoint.tree_size == 10 and bytes(checkpoint.root_hash) == made.root
    signed = opened(checkpoint.note)
    assert (signed.origin, signed.size, signed.root) == (
        settings.AUDIT_LOG_ORIGIN,
        10,
        made.root,
    )
    assert checkpoint.note.endswith("\n") and "\n\n\u2014 " in checkpoint.note
    assert checkpoint_make() is None  # nothing new
    append(10, 5)
    assert checkpoint_make().tree_size == 15
    assert opened(checkpoint_latest_note()).size == 15
    # The beat task ends every round with one; its first round takes the retired HMAC
    # chain in (none here: one entry says so).
    assert seal_inbox_task() == 1
    assert seal_inbox_task() == 0
    append(15, 1)
    seal_inbox_task()
    assert list(LogCheckpoint.objects.values_list("tree_size", flat=True)) == [
        10,
        15,
        16,
        17,
    ]


def _sql(statement: str, params=()):
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def test_a_tree_rewritten_behind_the_product_s_back_is_never_signed():
    append(0, 10)
    checkpoint_make()
    append(10, 6)
    node_table = connection.ops.quote_name(LogNode._meta.db_table)
    _sql(
        f"UPDATE {node_table} SET hash = %s WHERE position = %s",  # noqa: S608
        [b"\x01" * 32, merkle.stored_hash_index(3, 0)],
    )
    with pytest.raises(LogInconsistent, match="does not extend the checkpoint"):
        checkpoint_make()
    assert LogCheckpoint.objects.count() == 1


def test_a_log_cut_short_is_never_signed_whatever_the_stored_columns_say():
    append(0, 10)
    checkpoint = checkpoint_make()
    leaf_table = connection.ops.quote_name(LogLeaf._meta.db_table)
    checkpoint_table = connection.ops.quote_name(LogCheckpoint._meta.db_table)
    _sql(f'DELETE FROM {leaf_table} WHERE "index" >= 8')  # noqa: S608
    # Even the stored columns made to agree: the signed note decides.
    _sql(
        f"UPDATE {checkpoint_table} SET tree_size = 8 WHERE id = %s",  # noqa: S608
        [checkpoint.pk],
    )
    with pytest.raises(LogInconsistent, match="8 leaves, the latest checkpoint 10"):
        checkpoint_make()


def test_every_checkpoint_gets_its_file_and_latest_written_whole(settings, tmp_path):
    folder = tmp_path / "checkpoints"
    settings.AUDIT_CHECKPOINT_DIR = str(folder)
    append(0, 3)
    first = checkpoint_round()
    append(3, 4)
    second = checkpoint_round()
    files = sorted(p.name for p in folder.iterdir())
    assert files == [checkpoint_file_name(3), checkpoint_file_name(7), "latest"]
    assert (folder / checkpoint_file_name(3)).read_text() == first.note
    assert (folder / "latest").read_text() == second.note
    (folder / checkpoint_file_name(3)).unlink()  # lost: the next round writes it again
    assert checkpoint_publish() == {"file": True}
    assert (folder / checkpoint_file_name(3)).read_text() == first.note


def test_a_folder_that_cannot_be_written_is_counted_and_never_stops_the_round(
    settings, tmp_path
):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    settings.AUDIT_CHECKPOINT_DIR = str(blocked)
    before = failures("file")
    append(0, 2)
    assert checkpoint_round().tree_size == 2
    assert failures("file") == before + 1


class Witness:
    """A real HTTP server on loopback that records the notes POSTed to it."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.http = HttpDouble(lambda request: Reply(self.status, b"")).__enter__()
        self.url = f"{self.http.url}/add-checkpoint"

    @property
    def received(self) -> list[tuple[str, bytes]]:
        with self.http.lock:
            return [(r.headers["content-type"], r.body) for r in self.http.requests]

    @property
    def paths(self) -> list[str]:
        with self.http.lock:
            return [r.path for r in self.http.requests]

    def close(self) -> None:
        self.http.__exit__()


@pytest.fixture
def witness():
    server = Witness()
    yield server
    server.close()


def test_the_witness_gets_each_new_checkpoint_once(settings, witness):
    settings.AUDIT_WITNESS_URL = witness.url
    append(0, 4)
    checkpoint = checkpoint_round()
    assert witness.received == [("text/plain; charset=utf-8", checkpoint.note.encode())]
    checkpoint_round()  # nothing new: not sent again
    assert len(witness.received) == 1
    assert LogCheckpointDelivery.objects.filter(
        checkpoint=checkpoint, target=witness.url
    ).exists()


def test_a_witness_that_refuses_is_counted_and_tried_again_next_round(
    settings, witness
):
    settings.AUDIT_WITNESS_URL = witness.url
    witness.status = 503
    before = failures("witness")
    append(0, 4)
    assert checkpoint_round().tree_size == 4  # sealing goes on
    assert failures("witness") == before + 1
    assert not LogCheckpointDelivery.objects.exists()
    witness.status = 202
    checkpoint_round()
    assert len(witness.received) == 2
    assert LogCheckpointDelivery.objects.count() == 1


def test_an_unreachable_witness_is_counted_and_never_stops_the_round(settings):
    server = Witness()
    url = server.url
    server.close()  # nothing listens there any more
    settings.AUDIT_WITNESS_URL = url
    settings.AUDIT_WITNESS_TIMEOUT_SECONDS = 2
    before = failures("witness")
    append(0, 1)
    assert checkpoint_round().tree_size == 1
    assert failures("witness") == before + 1
    assert log_root() == (1, bytes(LogCheckpoint.objects.get().root_hash))


@pytest.mark.parametrize("host", ["127.0.0.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]"])
def test_a_witness_in_a_denied_network_is_sent_nothing(settings, witness, host):
    """The witness's URL is checked as a trigger's is (DEPLOY_TRIGGER_DENY_NETWORKS, every
    form of an address, the address connected to): loopback stands in for the denied
    network."""
    settings.DEPLOY_TRIGGER_DENY_NETWORKS = ["169.254.0.0/16", "127.0.0.0/8"]
    settings.AUDIT_WITNESS_URL = witness.url.replace("127.0.0.1", host)
    before = failures("witness")
    append(0, 2)
    assert checkpoint_round().tree_size == 2
    assert witness.received == []
    assert failures("witness") == before + 1
    assert not LogCheckpointDelivery.objects.exists()


@pytest.mark.slow
def test_a_witness_trickling_its_answer_holds_the_round_no_longer_than_its_timeout(
    settings,
):
    settings.AUDIT_WITNESS_TIMEOUT_SECONDS = 1
    with Trickler(part="headers", interval=0.2) as trickler:
        settings.AUDIT_WITNESS_URL = trickler.url
        append(0, 2)
        checkpoint_make()
        started = time.monotonic()
        assert checkpoint_publish() == {"witness": False}
        took = time.monotonic() - started
    assert took < 1 + LATE_SECONDS < trickler.lasts(), took
    assert trickler.connections[0].request_line.startswith("POST ")


class LongAnswer:
    """A witness that accepts, with an answer of 200 MiB, sent as fast as it is read."""

    SIZE = 200 * 1024 * 1024

    def __init__(self) -> None:
        self.sent = 0
        answer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Length", str(answer.SIZE))
                self.end_headers()
                chunk = b"\0" * (1024 * 1024)
                try:
                    while answer.sent < answer.SIZE:
                        self.wfile.write(chunk)
                        answer.sent += len(chunk)
                except OSError:
                    pass  # the caller hung up

            def log_message(self, *args):
                pass

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/add-checkpoint"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_the_witness_answer_is_not_read_into_memory(settings):
    server = LongAnswer()
    settings.AUDIT_WITNESS_URL = server.url
    append(0, 2)
    checkpoint_make()
    tracemalloc.start()
    try:
        assert checkpoint_publish() == {"witness": True}  # a 2xx is all it needs
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        server.close()
    assert peak < 8 * 1024 * 1024, peak
    assert server.sent < LongAnswer.SIZE
    assert LogCheckpointDelivery.objects.count() == 1


def test_the_witness_query_is_kept_out_of_every_record(settings, witness, caplog):
    """A token in the witness's URL reaches the witness, and nothing else: not the
    delivery's row (a fingerprint of the query stands for it), not a log line."""
    token = "witness-token-s3cret"
    settings.AUDIT_WITNESS_URL = f"{witness.url}?token={token}"
    caplog.set_level(logging.DEBUG)
    witness.status = 503
    append(0, 2)
    checkpoint_round()
    witness.status = 200
    checkpoint_round()
    assert witness.paths == [f"/add-checkpoint?token={token}"] * 2
    [delivery] = LogCheckpointDelivery.objects.all()
    assert token not in delivery.target
    assert delivery.target.startswith(f"{witness.url} (query sha256:")
    checkpoint_round()  # the same witness, told apart by the fingerprint: not sent again
    assert len(witness.paths) == 2
    for record in caplog.records:
        assert token not in record.getMessage()
        assert token not in str(record.__dict__)
