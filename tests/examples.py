"""How many examples a Hypothesis test draws: its full count in ``make test``, a third of it
(at least 10) in ``make test-fast``, which sets ``TEST_EXAMPLES=fast`` to keep the loop short
(docs/development.md, "What the test loop costs")."""

import os


def max_examples(full: int) -> int:
    if os.environ.get("TEST_EXAMPLES") == "fast":
        return max(10, full // 3)
    return full
