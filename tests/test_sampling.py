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


def test_seeded_sampling_is_reproducible():
    probs = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0).probs(LOGITS)
    a = [sample(probs, make_rng(5)) for _ in range(3)]
    b = [sample(probs, make_rng(5)) for _ in range(3)]
    assert a == b
    rng = make_rng(9)
    draws = [sample(probs, rng) for _ in range(20_000)]
    assert abs(draws.count(0) / 20_000 - 0.4) < 0.02
