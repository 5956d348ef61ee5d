"""The embedded default's broker (``core.broker``): a consumer polling the queue folder sees a
message whole or not at all, whatever another process is writing at the time."""

import multiprocessing
import os
from queue import Empty

from kombu import Connection

from core import broker

MESSAGES = 120
# Large enough that writing one takes the kernel several copies: a consumer polling the folder
# meanwhile would read it half-written if the file were visible under its final name.
BODY = "x" * 1_000_000


def _options(folder):
    return {"data_folder_in": str(folder), "data_folder_out": str(folder)}


def _produce(folder):
    broker.register()
    with Connection("filesystem://", transport_options=_options(folder)) as conn:
        channel = conn.default_channel
        for number in range(MESSAGES):
            channel._put("q", {"number": number, "body": BODY})


def test_filesystem_urls_use_the_transport_that_writes_a_message_whole(tmp_path):
    with Connection("filesystem://", transport_options=_options(tmp_path)) as conn:
        assert isinstance(conn.transport, broker.Transport)
        conn.default_channel._put("q", {"number": 1})
        # Nothing is left under the staging name once a message is put.
        assert [name.endswith(".q.msg") for name in os.listdir(tmp_path)] == [True]
        assert conn.default_channel._get("q") == {"number": 1}


def test_a_consumer_polling_while_another_process_writes_reads_every_message_whole(
    tmp_path,
):
    producer = multiprocessing.get_context("fork").Process(
        target=_produce, args=(tmp_path,)
    )
    producer.start()
    received, broken = [], []
    with Connection("filesystem://", transport_options=_options(tmp_path)) as conn:
        channel = conn.default_channel
        while True:
            try:
                message = channel._get("q")
            except Empty:
                if not producer.is_alive():
                    try:
                        message = channel._get("q")
                    except Empty:
                        break
                else:
                    continue
            except ValueError as exc:  # a body that does not decode
                broken.append(exc)
                continue
            assert message["body"] == BODY
            received.append(message["number"])
    producer.join(timeout=30)
    assert producer.exitcode == 0
    assert broken == []
    assert sorted(received) == list(range(MESSAGES))
