import binascii
from base64 import b64decode
from urllib import parse

from django.core.exceptions import FieldDoesNotExist, ValidationError
from rest_framework import exceptions
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination

# ``page_size``: ASCII digits. More than this many is beyond any maximum (and beyond what
# ``int()`` converts from text without a limit).
_PAGE_SIZE_MAX_DIGITS = 18


class CursorPage(CursorPagination):
    """``{"next", "previous", "results"}`` pages with an opaque cursor: stable under inserts and
    no ``COUNT(*)``, however large the table.

    A cursor the server did not issue is 404 ``not_found`` (docs/http-api.md, "Read APIs"),
    whatever it holds: DRF checks its offset and direction, and passes its position to the
    queryset as it came, where a position the ordering column cannot hold (``p=abc``, a number
    beyond the column's range) raised in the middle of the query.

    ``page_size`` is a whole number of at least 1 (larger than ``max_page_size`` is read as
    it), anything else 422 ``invalid_payload`` naming it: DRF ignored what it could not read
    (``page_size=abc`` was the default page), which no schema can state."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-id"

    _CURSOR_TOKENS = frozenset({"o", "r", "p"})

    def paginate_queryset(self, queryset, request, view=None):
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def get_page_size(self, request):
        value = request.query_params.get(self.page_size_query_param)
        if value is None:
            return self.page_size
        significant = value.lstrip("0")
        if not (value.isascii() and value.isdigit()) or not significant:
            raise exceptions.ValidationError(
                {self.page_size_query_param: ["A whole number of at least 1."]}
            )
        if len(significant) > _PAGE_SIZE_MAX_DIGITS:
            return self.max_page_size
        return min(int(significant), self.max_page_size)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1}
                parameter["description"] = (
                    f"The page's length: {self.page_size} by default, at most "
                    f"{self.max_page_size} (a larger one is read as "
                    f"{self.max_page_size})."
                )
        return parameters

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        self._cursor_tokens_check(encoded)
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            self._position_check(str(cursor.position))
        return cursor

    def _cursor_tokens_check(self, encoded: str) -> None:
        # What ``encode_cursor`` writes: strict base64 of a query string of ``o``, ``r`` and
        # ``p``, each at most once, ``r`` only as 1.
        try:
            querystring = b64decode(encoded.encode("ascii"), validate=True).decode(
                "ascii"
            )
        except (UnicodeError, binascii.Error):
            raise NotFound(self.invalid_cursor_message) from None
        pairs = parse.parse_qsl(querystring, keep_blank_values=True)
        names = [name for name, _ in pairs]
        if len(set(names)) != len(names) or not self._CURSOR_TOKENS.issuperset(names):
            raise NotFound(self.invalid_cursor_message)
        if dict(pairs).get("r", "1") != "1":
            raise NotFound(self.invalid_cursor_message)

    def _position_check(self, position: str) -> None:
        # The position is compared with the first ordering column: it must be a value that
        # column can hold, in the form this class writes it (``str()`` of the value).
        name = self.ordering[0].lstrip("-")
        try:
            field = self._model._meta.get_field(name)
        except FieldDoesNotExist:  # an annotation: the database compares it
            return
        try:
            value = field.to_python(position)
            field.run_validators(value)
        except (ValidationError, TypeError, ValueError):
            raise NotFound(self.invalid_cursor_message) from None
        if value is None or str(value) != position:
            raise NotFound(self.invalid_cursor_message)
