"""The soak's deliveries (``bench.soak``): the mix a producer's retries make, each kind what
it says it is."""

import json
from collections import Counter

from bench.soak import LATE_BACK, MIX_PERIOD, REDELIVERY_BACK, soak_requests
from webhooks.schemes import scheme_get


def test_the_soak_sends_a_tenth_redeliveries_and_a_twentieth_late_versions():
    requests_, kinds = soak_requests(1000, 4000)

    counts = Counter(kinds)
    assert len(requests_) == len(kinds) == 4000
    # Redeliveries begin once REDELIVERY_BACK new events have been sent (the first three
    # of their slots go to new events).
    assert counts["redelivery"] == 4000 * 2 // MIX_PERIOD - 3
    # Late versions begin once LATE_BACK new events have been sent (about 353 deliveries).
    assert 4000 // MIX_PERIOD - 18 <= counts["late"] <= 4000 // MIX_PERIOD
    bodies = {}
    for request, kind in zip(requests_, kinds, strict=True):
        event_id = request.headers["X-Webhook-Id"]
        body = json.loads(request.body)
        assert body["event_id"] == event_id
        if kind == "new":
            assert event_id not in bodies
            bodies[event_id] = request.body
        elif kind == "redelivery":
            # The same bytes as the event sent REDELIVERY_BACK new events before.
            assert bodies[event_id] == request.body
        else:
            newer = json.loads(bodies[event_id.replace("-late-", "-")])
            assert body["entity"]["entity_id"] == newer["entity"]["entity_id"]
            assert (
                body["entity"]["source_version"]
                == newer["entity"]["source_version"] - 1
            )
    assert REDELIVERY_BACK < LATE_BACK


def test_every_soak_delivery_is_signed_for_the_bench_source():
    from bench.ingest import SECRET

    requests_, _ = soak_requests(0, 400)

    scheme = scheme_get("hmac-sha256")
    for request in requests_:
        verified = scheme.verify(
            raw_body=request.body, headers=request.headers, secrets=[SECRET]
        )
        assert verified.event_id == request.headers["X-Webhook-Id"]
