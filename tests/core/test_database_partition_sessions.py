"""A process cut from PostgreSQL by a real partition (network namespaces, chaos.netns: packets
dropped between two hosts, nothing answered), in the middle of a transaction: once its own
side gives up (``tcp_user_timeout``), the server's side must give up too, or the session stays
"idle in transaction" with its row locks held long after the link is back (until the server's
keepalives of two hours), and every statement that needs those rows waits for them.

Runs as root (the suite does here): without root or ``ip netns`` it fails, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from chaos import netns
from chaos.services import PrivatePostgres
from tests.core.test_settings import PRODUCTION_ENV
from tests.processes import ROOT, wait_until

pytestmark = pytest.mark.slow

# A worker's transaction, on the product's production settings: a row locked, then a
# statement that the partition leaves unanswered.
WORKER = """
import time
import django
django.setup()
from django.db import connection, transaction
with transaction.atomic(), connection.cursor() as cursor:
    cursor.execute("SELECT id FROM held WHERE id = 1 FOR UPDATE")
    print("locked", flush=True)
    time.sleep(4)
    cursor.execute("SELECT 1")
"""
# The client's own bound (DATABASE_KEEPALIVES_*: 10 + 3 x 3 s), and the partition's length:
# past it, with room.
GIVES_UP_AFTER = 19
CUT_SECONDS = GIVES_UP_AFTER + 9


def sessions_of(url: str, address: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT state FROM pg_stat_activity WHERE client_addr = %s", [address]
        ).fetchall()
    return [state for (state,) in rows]


def row_lockable(url: str) -> bool:
    with psycopg.connect(url) as conn:
        conn.execute("SET lock_timeout = '2s'")
        try:
            conn.execute("SELECT id FROM held WHERE id = 1 FOR UPDATE")
        except psycopg.errors.LockNotAvailable:
            return False
        return True


def test_a_session_cut_off_in_a_transaction_ends_and_frees_its_rows():
    unusable = netns.usable()
    assert unusable is None, f"this test makes network namespaces: {unusable}"
    root = Path(tempfile.mkdtemp(prefix="partition-"))
    net = netns.Network(
        os.getpid(),
        netns.subnet_choose(os.getpid()),
        {"db": 10, "worker": 31},
    )
    pg = PrivatePostgres(
        root,
        host=net.address("db"),
        port=5432,
        trust=[str(net.subnet)],
        wrap=net.inside("db"),
    )
    worker = None
    try:
        net.build()
        pg.init()
        url = f"postgres://postgres@{net.address('db')}:5432/chaos"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE held (id int PRIMARY KEY)")
            conn.execute("INSERT INTO held VALUES (1)")
        worker = subprocess.Popen(
            [*net.inside("worker"), sys.executable, "-c", WORKER],
            cwd=ROOT,
            env={**PRODUCTION_ENV, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "locked"
        rules = net.cut("worker", "db")
        cut_at = time.monotonic()
        # The worker gives up on its side, as it should.
        worker.wait(timeout=GIVES_UP_AFTER + 30)
        assert "timed out" in worker.stdout.read()
        time.sleep(max(0.0, cut_at + CUT_SECONDS - time.monotonic()))
        net.heal(rules)

        # Once the link is back, nothing of the worker's is left on the server: no session,
        # no lock on its row.
        worker_address = net.address("worker")
        wait_until(
            lambda: sessions_of(url, worker_address) == [],
            timeout=10,
            what="the cut session to end",
        )
        assert row_lockable(url)
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
        pg.destroy()
        net.teardown()
        shutil.rmtree(root, ignore_errors=True)
