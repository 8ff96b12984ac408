"""The cost model (Leviathan et al.) against values worked out by hand: auto's and the bench's."""

from __future__ import annotations

import pytest

from specrun.bench.costmodel import alpha_from_steps, efficiency, predicted_speedup, predicted_speedup_of_steps
from specrun.defaults import LOOKUP, MODEL
from specrun.engine.auto.cost_model import Costs, expected_tokens


def measured(plain_s: float, verify_s: dict[int, float] | None = None, draft_token_s: float = 0.0) -> Costs:
    return Costs.measured({1: plain_s, **(verify_s or {})}, {MODEL: draft_token_s})


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
def test_expected_tokens_at_one_acceptance(alpha, k, expected):
    assert expected_tokens(alpha, k) == pytest.approx(expected)


def test_expected_tokens_is_the_geometric_series():
    alpha, k = 0.63, 6
    assert expected_tokens(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)))


def test_expected_tokens_by_position_hand_computed():
    assert expected_tokens([0.9, 0.8], 0) == 1.0
    assert expected_tokens([0.5, 0.5], 2) == pytest.approx(1.75)  # 1 + .5 + .25
    assert expected_tokens([0.9, 0.8, 0.5], 3) == pytest.approx(1 + 0.9 + 0.72 + 0.36)
    assert expected_tokens([0.9, 0.8, 0.5], 2) == pytest.approx(2.62)
    assert expected_tokens([1.0] * 4, 4) == 5.0
    assert expected_tokens([0.5], 3) == pytest.approx(1.5)  # positions beyond the list add nothing


def test_alpha_outside_unit_interval_is_rejected():
    with pytest.raises(ValueError):
        expected_tokens(1.2, 3)


def test_alpha_counts_only_judged_positions():
    # (drafted, accepted): 4/4 judged 4, 1/4 judged 2, 0/4 judged 1 → 5 accepted of 7 judged.
    assert alpha_from_steps([(4, 4), (4, 1), (4, 0)]) == pytest.approx(5 / 7)
    assert alpha_from_steps([(0, 0), (0, 0)]) is None
    assert alpha_from_steps([(2, 2), (0, 0)]) == 1.0


def test_predicted_speedup_by_hand():
    # plain 30 ms; a pass over 5 tokens 125 ms; a draft token 20 ms; α = 0.8, K = 4.
    costs = measured(0.030, {5: 0.125}, 0.020)
    assert costs.step_seconds(4, MODEL) == pytest.approx(0.080 + 0.125)
    assert costs.step_seconds(4, LOOKUP) == costs.step_seconds(4) == pytest.approx(0.125)  # lookup drafts for free
    assert predicted_speedup(0.8, 4, costs) == pytest.approx(3.3616 * 0.030 / 0.205)  # 0.49194…
    # a free drafter with a flat verify cost gains exactly E(α, K)
    flat = measured(0.030, {5: 0.030})
    assert predicted_speedup(0.8, 4, flat) == pytest.approx(3.3616)


def test_verify_cost_interpolates_between_measured_sizes():
    costs = measured(0.010, {3: 0.030, 5: 0.040})
    assert costs.verify(3) == 0.030
    assert costs.verify(2) == pytest.approx(0.020)
    assert costs.verify(4) == pytest.approx(0.035)
    assert costs.verify(7) == pytest.approx(0.050)  # extrapolated along the last segment
    assert measured(0.010).verify(3) == pytest.approx(0.030)  # only plain known: proportional


def test_a_drafter_without_timed_passes_costs_what_its_drafts_cost():
    costs = Costs(lambda n: 0.01 * n, {MODEL: lambda rows: 0.002 * rows}, {"text": lambda m: 0.005 + 0.001 * m})
    assert costs.draft_seconds(MODEL, 3) == pytest.approx(0.006)  # three one-row passes
    assert costs.draft_seconds("text", 3) == pytest.approx(0.008)
    assert costs.draft_seconds("text", 0) == costs.draft_seconds(None, 3) == 0.0


def test_remembered_costs_read_each_size_once():
    calls = []

    def verify(n: int) -> float:
        calls.append(n)
        return 0.01 * n

    costs = Costs(verify).remembered()
    assert [costs.step_seconds(k) for k in (1, 2, 1, 2)] == pytest.approx([0.02, 0.03, 0.02, 0.03])
    assert calls == [2, 3]


def test_prediction_over_steps_equals_the_formula_when_every_step_drafts_k():
    costs = measured(0.030, {5: 0.125}, 0.020)
    steps = [(0.8, 4, 4 * 0.020)] * 10
    assert predicted_speedup_of_steps(steps, costs) == pytest.approx(predicted_speedup(0.8, 4, costs))


def test_prediction_over_steps_mixes_short_and_empty_drafts():
    costs = measured(0.010, {3: 0.020})
    # one step drafting 2 at α 0.5 (1.75 tokens, 0.020 + 0.002 s), one empty lookup (1 token, 0.010 + 0.001 s)
    steps = [(0.5, 2, 0.002), (0.5, 0, 0.001)]
    assert predicted_speedup_of_steps(steps, costs) == pytest.approx(2.75 * 0.010 / 0.033)
    assert predicted_speedup_of_steps([], costs) is None


def test_prediction_over_steps_counts_a_constraints_lead_as_rows_and_kept_tokens():
    costs = measured(0.010, {3: 0.020})
    # a plain step with 2 forced tokens ahead: 3 tokens for a pass over 3 rows
    assert predicted_speedup_of_steps([(None, 0, 0.0, 2, 2)], costs) == pytest.approx(3 * 0.010 / 0.020)
    # on a GPU, where that pass costs one token's, the lead is all gain
    assert predicted_speedup_of_steps([(None, 0, 0.0, 2, 2)], costs.on_a_gpu()) == pytest.approx(3.0)
    # a lead cut short keeps what it kept
    assert predicted_speedup_of_steps([(None, 0, 0.0, 2, 1)], costs) == pytest.approx(2 * 0.010 / 0.020)


def test_efficiency():
    assert efficiency(0.5, 2.0) == 0.25
    assert efficiency(None, 2.0) is None
    assert efficiency(1.0, None) is None


def test_a_gpu_shapes_verification_flat_and_keeps_the_draft_share():
    costs = measured(0.030, {5: 0.120, 9: 0.200}, 0.006)
    gpu = costs.on_a_gpu()
    assert gpu.verify(5) == gpu.verify(9) == gpu.verify(1) == pytest.approx(0.030)
    assert gpu.draft_seconds(MODEL, 1) == costs.draft_seconds(MODEL, 1)
    assert predicted_speedup(0.8, 4, gpu) == pytest.approx(3.3616 * 0.030 / (4 * 0.006 + 0.030))
