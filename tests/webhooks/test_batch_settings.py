"""A batch's worst case must fit in its task: a configuration where it cannot is refused at
start, by every process."""

import pytest

from tests import processes
from webhooks.apps import batch_fits_in_a_task


def test_the_default_batch_fits_in_its_task():
    assert batch_fits_in_a_task() == []


def test_a_batch_whose_lock_waits_could_outlast_the_task_is_reported(settings):
    settings.INBOX_BATCH_SIZE = 200
    settings.INBOX_LOCK_TIMEOUT_MS = 2000
    [error] = batch_fits_in_a_task()
    assert error.id == "webhooks.E001"
    assert "402 s" in error.msg  # 200 waits, and the set's own before it


@pytest.mark.slow
def test_a_process_refuses_to_start_with_such_a_batch():
    result = processes.manage(
        "check", env=processes.child_env(INBOX_BATCH_SIZE="200"), timeout=60
    )
    assert result.returncode != 0
    assert "INBOX_BATCH_SIZE (200)" in result.stderr
