"""The auto controller and its estimates, driven by synthetic costs and acceptance streams."""

from __future__ import annotations

import json
import random

import pytest
from sim_control import GPU, SCENARIOS, Costs, OneSequence, compare

from specrun.engine.auto.control import Choice
from specrun.engine.auto.estimates import CalibratedCurve, CostCurve, DrafterEstimates, PositionRates

CPU = Costs(noise=0.0)
FLAT = Costs(plain=0.020, verify_points={1: 1.0}, verify_slope=0.02, noise=0.0)


def drive(controller, steps, accept, *, costs=CPU, draft_cost=None, start=0, seed=0, hint=None):
    """Run `steps` steps. accept(drafter, step) is the per-position acceptance; drafts are full
    length. hint(step) gives the lookup's confidences, when the loop passes them. Returns choices."""
    rng = random.Random(seed)
    draft_cost = draft_cost or {"draft": costs.draft_token, "ngram": costs.ngram}
    choices = []
    for step in range(start, start + steps):
        choice = controller.choose(hint(step) if hint else None)
        if choice.drafter is None or choice.k == 0:
            controller.observe_step(None, 0, 0, 0, 0.0, costs.verify(1), 1)
        else:
            rate, accepted = accept(choice.drafter, step), 0
            while accepted < choice.k and rng.random() < rate:
                accepted += 1
            t_draft = draft_cost[choice.drafter] * choice.k
            t_verify = costs.verify(choice.k + 1)
            controller.observe_step(choice.drafter, choice.k, choice.k, accepted, t_draft, t_verify, choice.k + 1)
        choices.append(choice)
    return choices


def steady(controller, rates, steps=300, **kw):
    """Choices made as the best (not measuring or probing) under constant acceptance rates."""
    return [c for c in drive(controller, steps, lambda d, _: rates[d], **kw) if c.reason == "best"]


# -- the formula --------------------------------------------------------------------------------


def test_profile_matches_the_formula_and_the_costs():
    c = OneSequence(["ngram"], 4, warmup_steps=0)
    for _ in range(400):  # always drafts 2 of a cap of 4, all accepted
        c.observe_step("ngram", 4, 2, 2, 0.001, CPU.verify(3), 3)
    c.observe_step(None, 0, 0, 0, 0.0, CPU.verify(1), 1)
    tokens, seconds = c.profile("ngram")[3]
    assert tokens == pytest.approx(3.0, abs=0.05)
    assert seconds == pytest.approx(0.001 + CPU.verify(3), rel=0.03)
    assert c.rates("ngram")[3] == pytest.approx(tokens / seconds)
    assert c.plain_rate() == pytest.approx(1 / CPU.verify(1))


def test_profiles_and_ceilings_follow_the_costs_each_observation_brings():
    c = OneSequence(["draft"], 4)
    c.seed({1: 0.030, 2: 0.050, 4: 0.090, 8: 0.160}, {"draft": 0.010})
    before_profile, before_ceiling = c.profile("draft")[2][1], c.ceiling("draft")
    for _ in range(30):  # verifying turns out twice as slow as calibrated, at every size
        c.observe([], rows=4, verify_s=0.180)
        c.observe([], rows=1, verify_s=0.060)
    assert c.profile("draft")[2][1] > 1.5 * before_profile
    assert c.ceiling("draft") < 0.75 * before_ceiling


# -- decisions ----------------------------------------------------------------------------------


def test_warmup_measures_plain_then_each_drafter():
    c = OneSequence(["ngram", "draft"], 8, warmup_steps=2, k_start=4)
    first = drive(c, 5, lambda d, s: 0.5)
    assert [(x.drafter, x.k, x.reason) for x in first] == [
        (None, 0, "warmup"),
        ("ngram", 4, "warmup"),
        ("ngram", 4, "warmup"),
        ("draft", 4, "warmup"),
        ("draft", 4, "warmup"),
    ]
    assert c.choose().reason != "warmup"


def test_plain_when_the_draft_is_expensive_and_rarely_accepted():
    c = OneSequence(["draft"], 8)
    choices = drive(c, 400, lambda d, s: 0.3)
    assert all(x.drafter is None for x in choices if x.reason == "best")
    probes = [i for i, x in enumerate(choices) if x.reason == "probe"]
    assert 1 <= len(probes) <= 6
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and gaps[-1] >= 2 * gaps[0]  # failing probes come ever more rarely
    assert c.label() == "auto: plain"


def test_plain_on_this_cpu_even_at_86_percent_acceptance():
    # measured: drafting costs 0.52 of a decode per token, so the draft model cannot win at α = 0.86
    best = steady(OneSequence(["draft"], 8), {"draft": 0.86}, steps=400)
    assert sum(x.drafter is None for x in best) >= 0.95 * len(best)


def test_long_drafts_when_acceptance_is_high_and_drafting_cheap():
    best = steady(OneSequence(["ngram"], 16), {"ngram": 0.98})
    assert all(x.drafter == "ngram" for x in best[-100:])
    assert min(x.k for x in best[-100:]) >= 8


def test_draft_model_with_a_middling_k_when_verification_is_nearly_free():
    c = OneSequence(["draft"], 16)
    best = steady(c, {"draft": 0.8}, costs=FLAT, draft_cost={"draft": 0.001})
    tail = best[-100:]
    assert all(x.drafter == "draft" for x in tail)
    assert 4 <= sorted(x.k for x in tail)[50] <= 10  # the optimum is 6 to 7 (a flat maximum)


def test_switches_to_plain_within_eight_steps_when_acceptance_collapses():
    c = OneSequence(["ngram"], 16)
    before = drive(c, 100, lambda d, s: 0.97)
    assert before[-1].drafter == "ngram" and before[-1].k >= 8
    after = drive(c, 40, lambda d, s: 0.0, start=100)
    first_plain = next(i for i, x in enumerate(after) if x.drafter is None)
    assert first_plain <= 8
    assert all(x.drafter is None for x in after[first_plain:] if x.reason == "best")


def test_reprobes_an_abandoned_drafter_and_returns_when_it_pays():
    c = OneSequence(["ngram"], 16)
    drive(c, 150, lambda d, s: 0.0)
    assert c.best() == Choice(None, 0)
    interval = c.probe_every["ngram"]
    assert interval > 16  # probes kept failing
    after = drive(c, interval + 40, lambda d, s: 0.97, start=150)
    first_probe = next(i for i, x in enumerate(after) if x.reason == "probe")
    assert first_probe <= interval
    back = next(i for i, x in enumerate(after) if x.reason == "best" and x.drafter == "ngram")
    assert back <= first_probe + 12  # successful probes are followed up at once
    assert c.probe_every["ngram"] == 16  # and the interval starts over


def test_an_empty_probe_of_a_cheap_drafter_is_retried_while_plain_is_best():
    c = OneSequence(["ngram"], 8, warmup_steps=1)
    drive(c, 60, lambda d, s: 0.0)
    probe = c.choose()
    while probe.reason != "probe":
        c.observe_step(None, 0, 0, 0, 0.0, CPU.verify(1), 1)
        probe = c.choose()
    c.observe_step("ngram", probe.k, 0, 0, 0.0001, CPU.verify(1), 1)  # no match: a plain step
    assert c.choose().reason == "probe"


def test_a_step_with_a_drafter_but_no_k_counts_as_plain():
    c = OneSequence(["ngram"], 8)
    c.observe_step("ngram", 0, 0, 0, 0.0, 0.05, 1)
    assert c.tracks["ngram"].steps == 0 and c.verify(1) == 0.05


def test_rejects_a_zero_k_max():
    with pytest.raises(ValueError):
        OneSequence(["ngram"], 0)


# -- the lookup's proposal in hand --------------------------------------------------------------


def test_hinted_lookup_is_taken_when_confident_and_skipped_when_doubtful():
    c = OneSequence(["ngram", "draft"], 16)
    drive(c, 50, lambda d, s: 0.5 if d == "ngram" else 0.86, hint=lambda s: [])
    confident = c.choose([0.95] * 16)
    assert confident.drafter == "ngram" and confident.k >= 8
    c.observe_step("ngram", confident.k, confident.k, confident.k, 0.0001, CPU.verify(confident.k + 1), confident.k + 1)
    doubtful = c.choose([0.3] * 2)
    assert doubtful.drafter is None or doubtful.reason == "probe"
    assert c.choose([]).drafter != "ngram"


def test_hinted_fallback_is_the_draft_model_where_verification_is_cheap():
    c = OneSequence(["ngram", "draft"], 16)
    drive(c, 60, lambda d, s: 0.8, costs=FLAT, draft_cost={"draft": 0.001, "ngram": 0.0001}, hint=lambda s: [0.3, 0.3])
    choice = c.choose([0.3, 0.3])
    assert choice.drafter == "draft" and choice.k >= 4
    assert c.choose([0.97] * 16).drafter == "ngram"


def test_hinted_mode_skips_warmup_and_probes_of_the_lookup():
    c = OneSequence(["ngram", "draft"], 8)
    choices = drive(c, 200, lambda d, s: 0.0 if d == "ngram" else 0.3, hint=lambda s: [])
    assert not any(x.drafter == "ngram" for x in choices)


# -- trimming a draft to what is worth verifying ------------------------------------------------


def _measured(costs=CPU) -> OneSequence:
    c = OneSequence(["ngram"], 16)
    drive(c, 40, lambda d, s: 0.5, costs=costs)
    return c


def test_trim_keeps_everything_before_costs_are_known():
    assert OneSequence(["ngram"], 8).trim([0.1, 0.1], 2) == 2
    assert _measured().trim(None, 3) == 3


def test_trim_drops_doubtful_tokens_where_verifying_costs_much():
    c = _measured()
    assert c.trim([0.3] * 4, 4) == 0
    assert c.trim([0.95] * 16, 16) >= 8
    assert c.trim([0.95, 0.95, 0.1, 0.1], 4) == 2


def test_trim_keeps_more_where_verifying_is_cheap():
    assert _measured(FLAT).trim([0.3] * 4, 4) >= 1


def test_trim_keeps_the_prefix_worth_most_counting_every_later_token():
    """The kept prefix is the one of the highest expected rate overall: a doubtful first token
    followed by a confident copy (a copy resumed after an edit) is worth a long batch, which
    judging token by token, with later tokens assumed as doubtful as the first, refused."""
    c = _measured()
    rng = random.Random(4)
    for _ in range(300):
        conf = [rng.random() ** 0.3 for _ in range(12)]
        rates = []
        tokens, survive = 1.0, 1.0
        rates.append(tokens / c.verify(1))
        for m, x in enumerate(conf, start=1):
            survive *= x
            tokens += survive
            rates.append(tokens / c.verify(m + 1))
        assert rates[c.trim(conf, 12)] >= 0.995 * max(rates)
    assert c.trim([0.8] + [0.99] * 15, 16) >= 8


def test_a_copy_that_ran_above_its_estimates_is_drafted_on():
    """Drafts all accepted (a copy better than its confidences said) raise the rate achieved; the
    next step still drafts the same copy rather than decode plain, which is slower still."""
    c = _measured()
    for _ in range(60):
        choice = c.choose([0.9] + [0.97] * 15)
        assert choice.drafter == "ngram" and choice.k >= 14  # the rate's maximum: a longer copy pays more
        c.observe_step("ngram", choice.k, choice.k, choice.k, 0.0001, c.verify(choice.k + 1), choice.k + 1)


# -- reporting ----------------------------------------------------------------------------------


def test_label_and_summary():
    c = OneSequence(["ngram"], 16)
    assert c.label() == "auto: measuring"
    drive(c, 100, lambda d, s: 0.98)
    assert c.label().startswith("auto: ngram K=")
    summary = json.loads(json.dumps(c.summary()))
    assert summary["steps"] == 100
    assert sum(row["steps"] for row in summary["choices"]) == 100
    assert summary["drafters"]["ngram"]["best_k"] >= 8
    assert summary["verify_s_by_batch"]["1"] == pytest.approx(CPU.verify(1))
    assert Choice(None, 0).label() == "plain" and Choice("draft", 3).label() == "draft K=3"


# -- estimates ----------------------------------------------------------------------------------


def test_position_rates_count_trials_up_to_the_first_failure_within_the_cap():
    rates = PositionRates(4, decay=1.0)
    rates.update(4, 2)  # positions 1, 2 accepted, 3 rejected, 4 never tried
    assert rates.trials == [1, 1, 1, 0] and rates.successes == [1, 1, 0, 0]
    rates.update(2, 2)  # all of a cap of 2 accepted
    assert rates.trials == [2, 2, 1, 0] and rates.successes == [2, 2, 0, 0]


def test_position_rates_lean_on_the_pooled_rate_where_untried():
    rates = PositionRates(6, decay=1.0)
    for _ in range(50):
        rates.update(2, 2)
    assert rates.rates()[0] > 0.95
    assert rates.rates()[5] == pytest.approx(rates.pooled())
    a = rates.rates()
    assert rates.survival(3) == pytest.approx([a[0], a[0] * a[1], a[0] * a[1] * a[2]])


def test_position_rates_forget_old_evidence():
    rates = PositionRates(2, decay=0.9)
    for _ in range(100):
        rates.update(1, 1)
    for _ in range(30):
        rates.update(1, 0)
    assert rates.rates(1)[0] < 0.1


def test_cost_curve_interpolates_and_extrapolates_measured_sizes():
    curve = CostCurve()
    assert not curve
    curve.add(1, 1.0)
    assert curve(3) == pytest.approx(3.0)  # one point: proportional, the cautious guess
    curve.add(2, 1.5)
    curve.add(5, 2.1)
    assert curve(2) == 1.5
    assert curve(4) == pytest.approx(1.9)
    assert curve(7) == pytest.approx(2.5)  # along the last segment
    assert curve.points() == {1: 1.0, 2: 1.5, 5: 2.1}


def test_cost_curve_never_extrapolates_downwards():
    curve = CostCurve()
    curve.add(4, 1.0)
    curve.add(6, 0.9)
    assert curve(10) == pytest.approx(0.9)
    assert curve(0) == pytest.approx(1.0)


def test_cost_curve_averages_then_tracks_drift():
    curve = CostCurve(decay=0.9)
    curve.add(1, 1.0)
    curve.add(1, 3.0)
    assert curve(1) == pytest.approx(2.0)
    for _ in range(100):
        curve.add(1, 5.0)
    assert curve(1) == pytest.approx(5.0, rel=1e-3)


def _geometric(rng, rate, k):
    accepted = 0
    while accepted < k and rng.random() < rate:
        accepted += 1
    return accepted


def test_a_collapse_is_noticed_in_two_steps():
    rng = random.Random(2)
    sure = DrafterEstimates(8)
    for _ in range(60):
        sure.update(8, 8, _geometric(rng, 0.97, 8), 0.0)
    before = sure.changes
    sure.update(8, 8, 0, 0.0)
    sure.update(8, 8, 0, 0.0)
    assert sure.changes == before + 1 and sure.accept.rates(1)[0] < 0.7


def test_a_surge_is_noticed_in_two_steps():
    rng = random.Random(1)
    low = DrafterEstimates(8)
    for _ in range(60):
        low.update(4, 4, _geometric(rng, 0.3, 4), 0.0)
    low.update(4, 4, 4, 0.0)
    low.update(4, 4, 4, 0.0)
    assert low.changes == 1 and min(low.accept.rates(6)) > 0.8


@pytest.mark.parametrize("rate, k", [(0.8, 6), (0.5, 4), (0.95, 12), (0.86, 4)])
def test_ordinary_luck_is_rarely_taken_for_a_change(rate, k):
    rng = random.Random(5)
    usual = DrafterEstimates(16)
    for _ in range(2000):
        usual.update(k, k, _geometric(rng, rate, k), 0.0)
    assert usual.changes <= 4  # at most one step in 500


# -- simulated throughput against every fixed configuration -------------------------------------


@pytest.mark.parametrize("name", ["prose, CPU", "code edit, CPU", "mixed, CPU"])
@pytest.mark.slow
def test_auto_keeps_up_with_the_best_fixed_configuration_on_this_cpu(name):
    costs, text = SCENARIOS[name]
    result = compare(costs, text, n_tokens=600, seeds=range(10))  # ten texts: timing noise averages out
    assert result["auto"] >= 0.98 * result["best_rate"], (result["best"], result["auto"] / result["best_rate"])
    assert result["auto"] >= 0.98 * result["plain"]


def test_auto_is_near_the_best_fixed_configuration_on_a_gpu():
    costs, text = SCENARIOS["prose, GPU"]
    assert costs is GPU
    result = compare(costs, text, n_tokens=600, seeds=range(3))
    assert result["auto"] >= 0.95 * result["best_rate"]


# -- cheap exploration ----------------------------------------------------------------------------


def test_a_drafter_that_cannot_win_even_at_full_acceptance_is_not_warmed_up_further():
    """Measured here: target pass 33 ms + 24 ms per extra token, draft model 20 ms per token; even
    with every draft token accepted, the draft model loses to plain decoding."""
    linear = Costs(
        plain=0.033, verify_points={1: 1.0, 2: 1.73, 5: 3.4, 9: 6.8}, verify_slope=0.72, draft_token=0.020, noise=0.0
    )
    c = OneSequence(["draft"], 8, warmup_steps=3)
    choices = drive(c, 5, lambda d, _: 1.0, costs=linear)
    warmups = [ch for ch in choices if ch.reason == "warmup" and ch.drafter == "draft"]
    assert len(warmups) == 1  # one step measured its costs; the other two were skipped
    assert c.hopeless("draft") and c.ceiling("draft") < c.plain_rate()


def test_a_drafter_that_could_win_is_still_warmed_up():
    c = OneSequence(["draft"], 8, warmup_steps=3)
    choices = drive(c, 5, lambda d, _: 0.9, costs=GPU)
    assert sum(ch.reason == "warmup" and ch.drafter == "draft" for ch in choices) == 3
    assert not c.hopeless("draft")


def test_lookup_proposal_is_tried_when_only_single_token_costs_are_known():
    c = OneSequence(["ngram"], 8)
    c.observe_step(None, 0, 0, 0, 0.0, 0.033, 1)
    choice = c.choose([0.9, 0.9, 0.9])
    assert choice.drafter == "ngram" and choice.k == 3 and choice.reason == "warmup"


def test_trim_does_not_count_tokens_the_proposal_does_not_have():
    """On a CPU where a pass over 2 tokens costs 2× one, a confident 1-token lookup proposal does
    not pay (longer drafts it does not have cannot rescue it); the same confidence over 15 tokens,
    verified in one cheap 16-token pass, does."""
    c = OneSequence(["ngram"], 31)
    c.seed({1: 0.031, 2: 0.063, 3: 0.080, 5: 0.123, 9: 0.245, 16: 0.254, 17: 0.319, 32: 0.462})
    assert c.trim([0.95], 1) == 0
    assert c.trim([0.95] * 15, 15) == 15


def test_a_draft_model_whose_catch_up_cannot_be_repaid_is_not_tried():
    """With few tokens left, catching the draft model up on a long history costs more than any
    speedup could return: auto decodes plain instead of warming it up."""
    c = OneSequence(["ngram", "draft"], 8)
    c.seed({1: 0.020, 5: 0.022, 9: 0.024}, {"draft": 0.001})
    catch_up = c.catch_up_seconds("draft", 4000)  # 4 s of catch-up against at most ~1 s to gain over 60 tokens
    assert catch_up == pytest.approx(4.0, rel=0.01)
    assert all(c.choose([], remaining=60, catchup_s={"draft": catch_up}).drafter is None for _ in range(10))
    short = c.catch_up_seconds("draft", 40)
    assert any(
        c.choose([], remaining=2000, catchup_s={"draft": short}).drafter == "draft" for _ in range(4)
    )  # worth it


def test_a_lookup_draft_is_taken_when_it_promises_more_than_plain_decoding():
    """Verify cost: 1 + 0.5 per extra token. One draft token at confidence c gives 1 + c tokens for
    1.5 passes' time: c = 0.55 promises 1.03× plain (taken), c = 0.45 promises 0.97× (not)."""
    c = OneSequence(["ngram"], 8, warmup_steps=0)
    c.seed({1: 0.020, 2: 0.030, 3: 0.040, 9: 0.100})
    assert c.choose([0.55]) == type(c.choose([]))("ngram", 1)
    assert c.choose([0.45]).drafter is None


# -- batch sizes that cost less than smaller ones -------------------------------------------------

# Measured on a 2-core CPU: 16-token passes are cheaper than 15-token ones (kernels work in tiles).
TILED = {1: 0.039, 2: 0.064, 4: 0.103, 8: 0.231, 9: 0.247, 15: 0.338, 16: 0.285, 17: 0.320, 31: 0.523, 32: 0.463}


CALIBRATED = {1: 0.030, 2: 0.056, 5: 0.120, 16: 0.26}


def test_a_machine_slower_than_at_calibration_raises_every_size_not_only_the_one_stepped():
    """Plain steps (size 1) running 27% slower than calibrated mean a 2-token verify costs 27% more
    too: keeping its calibrated price would make drafting look cheaper than it is."""
    controller = OneSequence(["ngram"], k_max=8)
    controller.seed(CALIBRATED)
    for _ in range(30):
        controller.observe_step(None, 0, 0, 0, 0.0, 0.038, 1)
    assert controller.verify(1) == pytest.approx(0.038, rel=0.02)
    assert controller.verify(2) == pytest.approx(0.056 * 0.038 / 0.030, rel=0.03)
    assert controller.verify(10) == pytest.approx(CostCurve.of(CALIBRATED)(10) * 0.038 / 0.030, rel=0.03)


def test_a_size_that_keeps_its_own_deviation_is_learned_beside_the_level():
    curve = CalibratedCurve(CALIBRATED)
    for _ in range(40):
        curve.add(1, 0.030)
        curve.add(2, 0.045)  # cheaper than calibrated, step after step
    assert curve(1) == pytest.approx(0.030, rel=0.05)
    assert curve(2) == pytest.approx(0.045, rel=0.05)
    assert curve(16) == pytest.approx(0.26, rel=0.15)  # the level stays near the calibration's
    assert set(curve.points()) == set(CALIBRATED)


def test_a_lookup_draft_fills_the_cheapest_batch_it_fits_in():
    c = OneSequence(["ngram"], 31, warmup_steps=0)
    c.seed(TILED)
    choice = c.choose([0.95] * 31)
    assert choice.drafter == "ngram" and choice.k + 1 in (16, 32)
    short = c.choose([0.95] * 13)  # 14 tokens at most: no cheap tile within reach
    assert short.drafter is None or short.k <= 13


def test_tokens_not_worth_verifying_alone_ride_along_when_the_batch_costs_no_more():
    c = OneSequence(["ngram"], 31, warmup_steps=0)
    c.seed(TILED)
    confidence = [0.99] * 12 + [0.0] * 19
    assert c.trim(confidence[:13], 13) == 12  # 13 tokens in hand: the 13th is not worth its verify row
    assert c.trim(confidence, 31) == 15
    choice = c.choose(confidence)
    assert choice.drafter == "ngram" and choice.k == 15  # a 16-token pass costs less than 13 tokens'


def test_a_drafter_with_a_cap_is_never_asked_for_more_than_it_drafts():
    """Chained MTP heads draft at most one token per head: warm-ups, probes and the best choice
    all stay within their cap while other drafters use the whole K."""
    c = OneSequence(["draft", "mtp"], 8, warmup_steps=2, k_start=4, drafter_k_max={"mtp": 2}, lookup=None)
    choices = drive(c, 400, lambda d, s: 0.95, draft_cost={"draft": 0.001, "mtp": 0.0001}, costs=FLAT)
    mtp = [x.k for x in choices if x.drafter == "mtp"]
    assert mtp and max(mtp) == 2
    assert max(x.k for x in choices if x.drafter == "draft") > 2
    uncapped = OneSequence(["draft", "mtp"], 8, warmup_steps=2, k_start=4, lookup=None)
    choices = drive(uncapped, 400, lambda d, s: 0.95, draft_cost={"draft": 0.001, "mtp": 0.0001}, costs=FLAT)
    assert max(x.k for x in choices if x.drafter == "mtp") > 2


def test_a_capped_drafters_costs_and_rates_stop_at_its_cap():
    """A DFlash block or a chain of MTP heads never drafts more than its cap, so the controller
    reads its step costs, ceiling and rates only that far: they are worked out every step."""
    c = OneSequence(["draft", "mtp"], 16, warmup_steps=0, drafter_k_max={"mtp": 3}, lookup=None)
    c.seed({1: 0.020, 17: 0.030}, {"draft": 0.002, "mtp": 0.001})
    assert len(c.rates("mtp")) == 3 and len(c.rates("draft")) == 16
    assert len(c._step_costs("mtp")) == 4
    assert c.ceiling("mtp") == pytest.approx(max((k + 1) / c.costs().step_seconds(k, "mtp") for k in (1, 2, 3)))


def test_a_drafter_the_seeded_costs_rule_out_is_never_chosen_whatever_its_estimates():
    """A flat verify curve and a draft pass of 16.6 ms against a 20 ms target pass: even at full
    acceptance the drafter reaches 1.18x plain, under the 1.2x a drafter must promise to be tried.
    Estimates of full acceptance (from an earlier run) would otherwise start an 8-token draft."""
    c = OneSequence(["ngram", "draft"], 8, warmup_steps=0, lookup="ngram")
    c.seed({1: 0.020, 9: 0.020}, {"draft": 0.01656})
    assert c.hopeless("draft")
    for _ in range(40):
        c.tracks["draft"].update(8, 8, 8, 8 * 0.01656)
    assert c.choose([]).drafter is None
    c.ruled_out.clear()  # the same estimates weighed: an 8-token draft pays
    assert c.choose([]) == Choice("draft", 8)


def test_positions_a_draft_almost_never_reaches_are_not_weighed():
    from specrun.engine.auto.control import REACH_FLOOR, reachable

    low = reachable([0.2] * 63)
    assert len(low) == 5 and 0.2**5 < REACH_FLOOR < 0.2**4  # the fifth is the first reached too seldom
    assert reachable([0.99] * 63) == [0.99] * 63
    assert reachable([0.0, 0.5]) == [0.0]


def test_a_warm_up_goes_to_the_sequence_with_least_to_catch_up():
    from specrun.engine.auto.control import Ask, Controller

    controller = Controller(["draft"], k_max=8)
    controller.seed({1: 0.01, 2: 0.0101, 4: 0.0102, 8: 0.0105}, {"draft": {1: 0.001}})
    asks = [Ask(0, 8, 500, catch_up_s={"draft": 0.05}), Ask(1, 8, 500, catch_up_s={"draft": 0.0})]
    decision = controller.plan(asks, max_rows=512)
    assert decision.choice(1).drafter == "draft" and decision.choice(1).reason == "warmup"
    assert decision.choice(0).reason != "warmup"  # the other is weighed, catch-up and all


def test_a_budgeted_warm_up_waits_until_the_busy_time_covers_its_catch_up():
    """A server's controller tries a drafter whose cache must catch up only while its tries stay
    within its share of the seconds stepped so far; without a budget it tries at once."""
    from specrun.engine.auto.control import Ask, Controller

    def warm_up(share, busy_s):
        controller = Controller(["draft"], k_max=8, explore_share=share)
        controller.seed({1: 0.01, 2: 0.0101, 4: 0.0102, 8: 0.0105}, {"draft": {1: 0.001}})
        controller.busy_s = busy_s
        decision = controller.plan([Ask(0, 8, 5000, catch_up_s={"draft": 0.05})], max_rows=512)
        return decision.choice(0).reason == "warmup", controller.explore_s

    assert warm_up(None, 0.0) == (True, 0.0)
    assert warm_up(0.03, 1.0) == (False, 0.0)  # 30 ms of budget, a 50 ms catch-up
    tried, spent = warm_up(0.03, 2.0)
    assert tried and 0.05 < spent < 0.06  # the catch-up and the try's extra draft passes and rows


def test_a_budgeted_switch_needs_room_for_its_catch_up_until_the_drafter_is_established():
    """Under a budget, the plan may not move a sequence to a drafter whose cache lags when the
    catch-up does not fit; once that drafter drafts for most sequences, its catch-ups are its price."""
    from specrun.engine.auto.control import Ask, Controller

    controller = Controller(["draft"], k_max=8, warmup_steps=0, explore_share=0.03)
    controller.seed({1: 0.01, 2: 0.0101, 4: 0.0102, 8: 0.0105}, {"draft": {1: 0.0005}})
    controller.busy_s = 1.0
    ask = Ask(0, 8, 5000, catch_up_s={"draft": 0.05})
    assert controller.plan([ask], max_rows=512).choice(0).drafter is None
    assert controller.plan([Ask(1, 8, 5000)], max_rows=512).choice(1).drafter == "draft"  # caught up: free to use
    for _ in range(20):
        controller.plan([Ask(1, 8, 5000)], max_rows=512)
    assert controller.established("draft")
    assert controller.plan([ask], max_rows=512).choice(0).drafter == "draft"
