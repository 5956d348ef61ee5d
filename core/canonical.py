from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

# What json.dumps(value, cls=DjangoJSONEncoder, ...) builds on every call, built once: an
# encoder holds only its options (every encode() starts afresh), so threads may share it.
_ENCODER = DjangoJSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8: the bytes every fingerprint hashes
    (webhook content, idempotency keys). Dates and decimals as Django serialises them."""
    return _ENCODER.encode(value).encode()
