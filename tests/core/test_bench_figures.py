"""How ``make bench`` judges a figure measured in interleaved rounds: by the median of each
round's own ratio to the floor of the same round (docs/benchmarks.md, "How to read it")."""

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
