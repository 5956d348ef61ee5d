"""The metrics folder a server sets up for its processes (core/metrics_dir.py)."""

import os
import subprocess
import tempfile

import pytest

from core.metrics_dir import MULTIPROC_DIR_VARIABLE, metrics_dir_prepare


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    """An empty system temporary directory, and no folder named in the environment (both
    restored afterwards)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(MULTIPROC_DIR_VARIABLE, "placeholder")
    monkeypatch.delenv(MULTIPROC_DIR_VARIABLE)
    return tmp_path


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_server_gets_a_fresh_folder_of_its_own(temp_dir):
    path = metrics_dir_prepare(server="gunicorn")
    assert os.environ[MULTIPROC_DIR_VARIABLE] == path
    assert os.path.dirname(path) == str(temp_dir)
    assert os.path.basename(path).startswith(f"prometheus-gunicorn-{os.getpid()}-")
    assert os.listdir(path) == []


@pytest.mark.slow  # starts a process, to have the pid of one that has ended
def test_the_folders_of_servers_that_died_outright_are_removed(temp_dir):
    dead = temp_dir / f"prometheus-celery-{dead_pid()}-abc"
    alive = temp_dir / f"prometheus-celery-{os.getppid()}-def"
    other_server = temp_dir / f"prometheus-gunicorn-{dead_pid()}-ghi"
    for folder in (dead, alive, other_server):
        folder.mkdir()
        (folder / "counter_1.db").write_bytes(b"")
    metrics_dir_prepare(server="celery")
    assert not dead.exists()
    assert alive.exists()
    assert other_server.exists()  # its own server cleans up after it


def test_a_folder_the_operator_names_is_used_as_it_is(temp_dir, monkeypatch):
    shared = temp_dir / "shared"
    shared.mkdir()
    (shared / "counter_1.db").write_bytes(b"")
    monkeypatch.setenv(MULTIPROC_DIR_VARIABLE, str(shared))
    assert metrics_dir_prepare(server="gunicorn") == str(shared)
    assert (shared / "counter_1.db").exists()  # shared on purpose: never emptied here
    assert sorted(p.name for p in temp_dir.iterdir()) == ["shared"]
