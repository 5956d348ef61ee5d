import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8: the bytes every fingerprint hashes
    (webhook content, idempotency keys). Dates and decimals as Django serialises them."""
    return json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        cls=DjangoJSONEncoder,
    ).encode()
