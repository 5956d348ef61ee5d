"""Structured logs with a correlation id carried from the request through the Celery task.

The id is the webhook's event id (from its id header) or the request's Idempotency-Key; it lives
in a context variable, is added to every log record by ``CorrelationIdFilter``, travels with each
task published while it is set (a message header), and is restored in the worker around the task.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from .headers import EnvironHeaders

correlation_id_var: contextvars.ContextVar[str] = contextvars.ContextVar(
    "correlation_id", default=""
)

# Headers that name the operation a request is about, in order of preference: those the apps
# register (a webhook's event id header, one per signature scheme), then these.
GENERIC_CORRELATION_HEADERS = ("Idempotency-Key", "X-Request-Id")
_registered_headers: list[str] = []


def correlation_headers_register(names: Iterable[str]) -> None:
    """Adds headers whose value is a request's correlation id, before the generic ones; called
    by the apps from their ``AppConfig.ready``."""
    for name in names:
        if name not in _registered_headers:
            _registered_headers.append(name)


def correlation_headers() -> tuple[str, ...]:
    return (*_registered_headers, *GENERIC_CORRELATION_HEADERS)


# Not "correlation_id": Celery already uses that name for the task id.
CELERY_HEADER = "x_correlation_id"
_MAX_LENGTH = 255


def correlation_id_get() -> str:
    return correlation_id_var.get()


@contextmanager
def correlation_id_bound(value: str) -> Iterator[None]:
    token = correlation_id_var.set(value[:_MAX_LENGTH] if value else "")
    try:
        yield
    finally:
        correlation_id_var.reset(token)


class CorrelationIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "correlation_id", None):
            value = correlation_id_var.get()
            if value:
                record.correlation_id = value
        return True


class CorrelationIdMiddleware:
    """Binds the request's correlation id for the duration of the request, and only then (a
    sync worker thread serves many requests: nothing may leak from one to the next)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        # The environ read directly: building request.headers for these two lookups cost
        # every request more than the lookups (core/headers.py).
        headers = EnvironHeaders(request.META)
        value = next(
            (value for h in correlation_headers() if (value := headers.get(h))), ""
        )
        if not value.isprintable():
            value = ""
        with correlation_id_bound(value):
            return self.get_response(request)


def celery_signals_connect() -> None:
    """Carries the correlation id in task message headers and restores it in the worker."""
    from celery import signals

    tokens: dict[str, contextvars.Token] = {}

    @signals.before_task_publish.connect(weak=False)
    def _publish(headers=None, **kwargs):
        value = correlation_id_var.get()
        if value and headers is not None and CELERY_HEADER not in headers:
            headers[CELERY_HEADER] = value

    @signals.task_prerun.connect(weak=False)
    def _prerun(task_id=None, task=None, **kwargs):
        value = getattr(task.request, CELERY_HEADER, None) or ""
        if value:
            tokens[task_id] = correlation_id_var.set(value)

    @signals.task_postrun.connect(weak=False)
    def _postrun(task_id=None, **kwargs):
        token = tokens.pop(task_id, None)
        if token is not None:
            correlation_id_var.reset(token)
