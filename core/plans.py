"""The console's statements are planned for their values, every time (docs/scaling.md,
"Database timeouts").

On PostgreSQL the product's connections prepare a statement they run often
(``config.settings._helpers.database_binding_apply``): ingest's few statements are then
parsed and planned once per connection. After five runs of a prepared statement PostgreSQL
may switch to a generic plan, made without the values, and keep it while it looks as cheap
as the plans made with them. For the console's pages that is the wrong bet: a search is
``event_id LIKE $1``, which a generic plan cannot read through the prefix index, and a
filter's status may name a tenth of the rows or a handful. Measured on the inbox at ten
million rows: the changelist's date bounds for a search (``MIN``/``MAX`` of ``received_at``)
took 10 ms while planned for the term, then 9 to 34 s from the sixth run of the page on the
same connection, the generic plan walking the whole received-time index for rows that sit at
its far end (docs/bench-log/2026-12-06.md, "The console at ten million rows").

So a request to the admin runs its statements with values unprepared: psycopg sends each
one unnamed, and PostgreSQL plans it with its values. Only the client's side changes (psycopg's
``prepare_threshold``, for the request's duration): nothing stays on the server's session,
which a pooler in transaction mode could hand to another client. A statement without
values has one plan whatever runs it: the console's are prepared at their first run on the
connection rather than their fifth, as the connection would have prepared them anyway; a
console page loaded a few times a minute reused none before (docs/scaling.md, "The console's
first pages at ten million rows"). A status the code knows (the dead-letter queue's, a
status filter's choice, a type among the type filter's) is written into the statement
rather than sent as a value (``core.models.Constant``), so that such a list's statements
are of that kind too, one plan per word. Everything else keeps its prepared statements.
"""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from .db import prepared_at_once, values_planned


def _unprepared(execute, sql, params, many, context):
    """An execute wrapper: the statement sent unnamed, planned for its values. A statement
    without values is prepared at its first run on the connection: its generic plan is the
    plan made for it, planned once from then on, where psycopg would plan it four more
    times before preparing it (the type filter's choices, a loose scan of every partition of
    the inbox: 8.7 ms a page planned, 2.0 prepared, at 38 partitions; the date hierarchy's
    first and last row 6.3 ms and 0.3; docs/scaling.md, "The console's first pages at ten
    million rows")."""
    planned = prepared_at_once() if not params else values_planned()
    with planned:
        return execute(sql, params, many, context)


class ConsolePlansMiddleware:
    """Every statement with values of a request under the admin's prefix unprepared (module
    docstring). On the embedded SQLite default there is nothing to do."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.admin_prefix = reverse("admin:index")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if connection.vendor != "postgresql" or not request.path.startswith(
            self.admin_prefix
        ):
            return self.get_response(request)
        with connection.execute_wrapper(_unprepared):
            return self.get_response(request)
