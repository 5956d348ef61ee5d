"""How ``make bench`` judges a figure measured in interleaved rounds: by the median of each
round's own ratio to the floor of the same round (docs/benchmarks.md, "How to read it"); the
ingest figure of v1a (Ed25519) deliveries against v1 ones, and what it sends."""

import pytest

from bench.harness import Figure, LoadResult, round_ratios


def _run(rps: float) -> LoadResult:
    return LoadResult(
        requests=int(rps * 10),
        seconds=10.0,
        rps=rps,
        p50_ms=1.0,
        p99_ms=2.0,
        statuses={"202": int(rps * 10)},
        socket_errors=0,
        wrapped=0,
    )


def test_a_figure_of_rounds_is_judged_by_the_median_of_the_rounds_own_ratios():
    # The machine's speed moved between rounds: the figure's median comes from a slow round,
    # its floor's from a fast one, although four rounds of five read 0.86 to 0.90 of their
    # own floor (one, hit by a neighbour during the figure's run only, 0.42).
    floors = [_run(rps) for rps in (300, 700, 720, 740, 310)]
    values = [_run(rps) for rps in (270, 600, 300, 650, 280)]
    ratios = round_ratios(values, floors)
    assert ratios == pytest.approx([0.9, 600 / 700, 300 / 720, 650 / 740, 280 / 310])
    figure = Figure(
        "ingest",
        "new events",
        300,  # the values' median
        "req/s",
        floor_name="floor",
        floor_value=700,  # the floors' median
        target_ratio=0.75,
        round_ratios=ratios,
    )
    assert figure.ratio_of_medians == pytest.approx(300 / 700)
    assert figure.ratio == pytest.approx(650 / 740)
    assert figure.meets_target is True
    data = figure.as_dict()
    assert data["ratio"] == pytest.approx(650 / 740)
    assert data["ratio_of_medians"] == pytest.approx(300 / 700)
    assert data["round_ratios"] == pytest.approx(ratios)


def test_the_median_of_the_rounds_can_miss_its_target():
    floors = [_run(1000)] * 3
    values = [_run(rps) for rps in (900, 700, 600)]
    figure = Figure(
        "ingest",
        "new events",
        700,
        "req/s",
        floor_name="floor",
        floor_value=1000,
        target_ratio=0.75,
        round_ratios=round_ratios(values, floors),
    )
    assert figure.ratio == pytest.approx(0.7)
    assert figure.meets_target is False


def test_a_figure_without_rounds_keeps_its_value_over_its_floor():
    figure = Figure("x", "y", 50, "req/s", floor_name="f", floor_value=200)
    assert figure.ratio == figure.ratio_of_medians == pytest.approx(0.25)


def test_rounds_of_a_figure_and_its_floor_must_pair_up():
    with pytest.raises(ValueError, match="3 rounds of the figure, 2 of its floor"):
        round_ratios([_run(1)] * 3, [_run(1)] * 2)


def test_ingest_reports_v1a_deliveries_against_the_v1_ones_of_the_same_rounds():
    from bench.ingest import v1a_figures

    rounds = [
        {"new": _run(v1), "new_v1a": _run(v1a)}
        for v1, v1a in ((300, 270), (700, 560), (720, 650))
    ]
    ratio, p50, p99 = v1a_figures(rounds)
    assert (ratio.value, ratio.floor_value) == (560, 700)
    assert ratio.floor_name == "v1 new events"
    assert ratio.target_ratio is None
    # The median of the rounds' own 0.9, 0.8 and 0.903; of the two medians, 0.8.
    assert ratio.ratio == pytest.approx(0.9)
    assert ratio.ratio_of_medians == pytest.approx(0.8)
    assert p50.name.endswith("p50") and p99.higher_is_better is False


@pytest.mark.django_db
def test_the_v1a_deliveries_of_ingest_are_what_a_public_key_source_accepts():
    """The bench's producer key signs for the public key its v1a source holds: every
    request is a 202 at the real view, as ``bench.ingest`` checks of every answer."""
    from django.test import Client

    from bench.ingest import SLUG_V1A, V1A_PRIVATE_KEY, signed_events
    from core.actors import Actor
    from tests.webhooks.factories import webhook_post
    from webhooks.schemes import public_key_of
    from webhooks.sources import webhook_source_create

    webhook_source_create(
        slug=SLUG_V1A,
        scheme="standard-webhooks",
        handler="research",
        public_key=public_key_of(V1A_PRIVATE_KEY),
        actor=Actor.system(),
    )
    for request in signed_events(range(3), v1a=True):
        assert request.path == f"/webhooks/{SLUG_V1A}/"
        assert request.headers["webhook-signature"].startswith("v1a,")
        headers = {k: v for k, v in request.headers.items() if k != "Content-Type"}
        response = webhook_post(Client(), SLUG_V1A, request.body, headers)
        assert response.status_code == 202, response.content
