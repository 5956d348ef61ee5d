"""Typed errors of the verifiable log's reads, mapped to HTTP answers by
``core.exceptions.error_json_response`` (docs/http-api.md, "Verifiable log")."""

from core.errors import ServiceError


class InvalidParameter(ServiceError):
    """A query parameter missing, or not a decimal integer."""

    status_code = 400
    code = "invalid_parameter"


class InvalidRange(ServiceError):
    """Sizes or indexes outside what a proof is defined for (``0 <= index < size``,
    ``0 < from <= to``)."""

    status_code = 400
    code = "invalid_range"


class BeyondTree(ServiceError):
    """A size past the tree's current size."""

    status_code = 404
    code = "beyond_tree"

    def __init__(self, *, size: int, tree_size: int) -> None:
        super().__init__(
            f"size {size} is beyond the tree's size {tree_size}",
            extra={"tree_size": tree_size},
        )
        self.size = size
        self.tree_size = tree_size
