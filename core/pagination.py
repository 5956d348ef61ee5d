from rest_framework.pagination import CursorPagination


class CursorPage(CursorPagination):
    """``{"next", "previous", "results"}`` pages with an opaque cursor: stable under inserts and
    no ``COUNT(*)``, however large the table."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
    ordering = "-id"
