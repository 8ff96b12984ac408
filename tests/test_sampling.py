"""Sampling transforms in llama.cpp's order (top-k, top-p, min-p, then temperature)."""

from __future__ import annotations

import numpy as np

from specrun.engine.sampling import SamplingParams, make_rng, sample

LOGITS = np.log(np.array([0.4, 0.3, 0.2, 0.06, 0.04]))


def test_greedy_is_point_mass_on_argmax():
    probs = SamplingParams(temperature=0).probs(LOGITS)
    assert probs.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_no_transform_is_softmax():
    probs = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0).probs(LOGITS)
    assert np.allclose(probs, [0.4, 0.3, 0.2, 0.06, 0.04])


def test_top_k_keeps_k_most_likely():
    probs = SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0).probs(LOGITS)
    assert np.allclose(probs, [0.4 / 0.7, 0.3 / 0.7, 0, 0, 0])


def test_top_p_keeps_smallest_prefix_reaching_mass():
    probs = SamplingParams(temperature=1.0, top_k=0, top_p=0.85, min_p=0.0).probs(LOGITS)
    assert np.count_nonzero(probs) == 3


def test_min_p_drops_tokens_below_fraction_of_top():
    probs = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.2).probs(LOGITS)
    assert np.count_nonzero(probs) == 3  # 0.06 < 0.2·0.4


def test_temperature_sharpens_survivors():
    cold = SamplingParams(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0).probs(LOGITS)
    assert cold[0] > 0.4 and np.isclose(cold.sum(), 1.0)


def test_seeded_draws_repeat_and_follow_the_probabilities():
    probs = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0).probs(LOGITS)
    rng = make_rng(5)
    first = [sample(probs, rng) for _ in range(50)]
    assert first == [sample(probs, r) for r in [make_rng(5)] for _ in range(50)]  # one seed, one sequence
    assert first != [sample(probs, r) for r in [make_rng(6)] for _ in range(50)]  # another seed, another
    rng = make_rng(9)
    draws = [sample(probs, rng) for _ in range(20_000)]
    for token, p in enumerate([0.4, 0.3, 0.2, 0.06, 0.04]):
        assert abs(draws.count(token) / 20_000 - p) < 0.015


def test_an_unseeded_generator_draws_a_fresh_seed():
    assert make_rng(None).random() != make_rng(None).random()


def test_sample_never_returns_a_token_of_probability_zero():
    probs = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    rng = make_rng(1)
    assert {sample(probs, rng) for _ in range(2000)} == {1, 3}
