"""The registry of deployment and build executors: ``DEPLOY_EXECUTOR`` names one.

An executor is a function ``(job) -> ExecutionResult`` that does the work of a claimed job
outside any transaction. It is called at most once per job. Adding an executor is one function
and one line here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from .models import Job

EXECUTORS: dict[str, str] = {
    "simulated": "deployments.executors.simulated_execute",
}


@dataclass(frozen=True)
class ExecutionResult:
    succeeded: bool
    detail: str = ""


def simulated_execute(job: Job) -> ExecutionResult:
    """Sleeps ``DEPLOY_SIMULATED_SECONDS`` and fails with ``DEPLOY_SIMULATED_FAILURE_RATE``."""
    time.sleep(settings.DEPLOY_SIMULATED_SECONDS)
    if random.random() < settings.DEPLOY_SIMULATED_FAILURE_RATE:
        return ExecutionResult(succeeded=False, detail="simulated failure")
    return ExecutionResult(succeeded=True, detail="simulated")


def executor_get(name: str | None = None) -> Callable[[Job], ExecutionResult]:
    return import_string(EXECUTORS[name or settings.DEPLOY_EXECUTOR])
