"""The Leviathan et al. cost model against values worked out by hand."""

from __future__ import annotations

import pytest

from specrun.bench.costmodel import (
    Costs,
    alpha_from_steps,
    efficiency,
    expected_tokens_per_step,
    predicted_speedup,
    predicted_speedup_of_steps,
    step_seconds,
)


@pytest.mark.parametrize(
    "alpha, k, expected",
    [
        (0.8, 4, (1 - 0.8**5) / 0.2),  # 3.3616
        (0.5, 1, 1.5),  # 1 + α
        (0.5, 2, 1.75),  # 1 + α + α²
        (0.0, 8, 1.0),  # every draft rejected: the target's own token only
        (1.0, 4, 5.0),  # every draft accepted: K + 1
        (0.7, 0, 1.0),  # no drafting is plain decoding
    ],
)
def test_expected_tokens_per_step(alpha, k, expected):
    assert expected_tokens_per_step(alpha, k) == pytest.approx(expected)


def test_expected_tokens_is_the_geometric_series():
    alpha, k = 0.63, 6
    assert expected_tokens_per_step(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)))


def test_alpha_outside_unit_interval_is_rejected():
    with pytest.raises(ValueError):
        expected_tokens_per_step(1.2, 3)


def test_alpha_counts_only_judged_positions():
    # (drafted, accepted): 4/4 judged 4, 1/4 judged 2, 0/4 judged 1 → 5 accepted of 7 judged.
    assert alpha_from_steps([(4, 4), (4, 1), (4, 0)]) == pytest.approx(5 / 7)
    assert alpha_from_steps([(0, 0), (0, 0)]) is None
    assert alpha_from_steps([(2, 2), (0, 0)]) == 1.0


def test_predicted_speedup_by_hand():
    # plain 30 ms; a pass over 5 tokens 125 ms; a draft token 20 ms; α = 0.8, K = 4.
    costs = Costs(plain_s=0.030, verify_s={1: 0.030, 5: 0.125}, draft_token_s=0.020)
    assert step_seconds(costs, 4) == pytest.approx(0.080 + 0.125)
    assert predicted_speedup(0.8, 4, costs) == pytest.approx(3.3616 * 0.030 / 0.205)  # 0.49194…
    # a free drafter with a flat verify cost gains exactly E(α, K)
    flat = Costs(plain_s=0.030, verify_s={5: 0.030}, draft_token_s=0.0)
    assert predicted_speedup(0.8, 4, flat) == pytest.approx(3.3616)


def test_verify_cost_interpolates_between_measured_sizes():
    costs = Costs(plain_s=0.010, verify_s={1: 0.010, 3: 0.030, 5: 0.040})
    assert costs.verify(3) == 0.030
    assert costs.verify(2) == pytest.approx(0.020)
    assert costs.verify(4) == pytest.approx(0.035)
    assert costs.verify(7) == pytest.approx(0.050)  # extrapolated along the last segment
    assert Costs(plain_s=0.010).verify(3) == pytest.approx(0.030)  # only plain known: proportional


def test_prediction_over_steps_equals_the_formula_when_every_step_drafts_k():
    costs = Costs(plain_s=0.030, verify_s={1: 0.030, 5: 0.125}, draft_token_s=0.020)
    steps = [(0.8, 4, 4 * 0.020)] * 10
    assert predicted_speedup_of_steps(steps, costs) == pytest.approx(predicted_speedup(0.8, 4, costs))


def test_prediction_over_steps_mixes_short_and_empty_drafts():
    costs = Costs(plain_s=0.010, verify_s={1: 0.010, 3: 0.020})
    # one step drafting 2 at α 0.5 (1.75 tokens, 0.020 + 0.002 s), one empty lookup (1 token, 0.010 + 0.001 s)
    steps = [(0.5, 2, 0.002), (0.5, 0, 0.001)]
    assert predicted_speedup_of_steps(steps, costs) == pytest.approx(2.75 * 0.010 / 0.033)
    assert predicted_speedup_of_steps([], costs) is None


def test_efficiency():
    assert efficiency(0.5, 2.0) == 0.25
    assert efficiency(None, 2.0) is None
    assert efficiency(1.0, None) is None


def test_a_gpu_shapes_verification_flat_and_keeps_the_draft_share():
    from specrun.bench.costmodel import on_a_gpu

    costs = Costs(0.030, {5: 0.120, 9: 0.200}, 0.006)
    gpu = on_a_gpu(costs)
    assert gpu.verify(5) == gpu.verify(9) == gpu.verify(1) == pytest.approx(0.030)
    assert gpu.draft_token_s == costs.draft_token_s
    assert predicted_speedup(0.8, 4, gpu) == pytest.approx(3.3616 * 0.030 / (4 * 0.006 + 0.030))
