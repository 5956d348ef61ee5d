"""The Idempotency-Key header's rules (docs/http-api.md, "Idempotency-Key")."""

from .errors import IdempotencyKeyRequired, InvalidIdempotencyKey

KEY_MAX_LENGTH = 255
# The rule above as the OpenAPI schema states it for the header: 1-255 printable ASCII
# characters, none of them a space at either end, since HTTP drops those from a header's
# value before any application reads it (" a" arrives as "a", " " as an empty header).
KEY_HEADER_PATTERN = r"^[!-~](?:[ -~]{0,253}[!-~])?$"


def idempotency_key_is_well_formed(key: str) -> bool:
    """1-255 printable ASCII characters: the only keys that can have a record."""
    return 0 < len(key) <= KEY_MAX_LENGTH and all(" " <= ch <= "~" for ch in key)


def idempotency_key_validate(*, key: str | None) -> str:
    """The Idempotency-Key header: required, 1-255 printable ASCII characters."""
    if key is None or key == "":
        raise IdempotencyKeyRequired()
    if not idempotency_key_is_well_formed(key):
        raise InvalidIdempotencyKey()
    return key
