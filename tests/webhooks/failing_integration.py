"""An integration whose handler fails the way real code does: a query the database refuses,
whose error text quotes the SQL. Registered by the tests that need it."""

from __future__ import annotations

from django.db import connection

from webhooks.integrations import HandlerResult


class FailingSqlIntegration:
    name = "failing-sql"
    label = "Fails with an SQL error"

    def envelope(self, **kwargs):  # pragma: no cover - rows are created directly
        raise NotImplementedError

    def handle(self, event) -> HandlerResult:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT secret FROM webhooks_webhooksecret WHERE no_such_column = %s",
                [event.event_id],
            )
        raise AssertionError("unreachable")

    def sample(self, *, event_id: str):  # pragma: no cover
        raise NotImplementedError


integration = FailingSqlIntegration()
