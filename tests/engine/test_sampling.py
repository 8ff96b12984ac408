"""Sampling transforms in llama.cpp's order (top-k, top-p, min-p, then temperature)."""

from __future__ import annotations

import numpy as np
import pytest
from dists import dense

from specrun.engine import sampling
from specrun.engine.sampling import SamplingParams, Uniforms, make_rng, sample, top_ids

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


def test_a_sequences_uniforms_are_numpys_draws_in_numpys_order():
    """Drawn a block at a time, yet the same numbers single draws from the seed give: a seed's
    output is what it was with one numpy call per draw."""
    n = 3 * Uniforms.BLOCK + 5
    uniforms, generator = make_rng(21), np.random.default_rng(21)
    assert [uniforms.random() for _ in range(n)] == [generator.random() for _ in range(n)]


def test_an_unseeded_generator_draws_a_fresh_seed():
    assert make_rng(None).random() != make_rng(None).random()


def test_sample_never_returns_a_token_of_probability_zero():
    probs = np.array([0.0, 0.5, 0.0, 0.5, 0.0])
    rng = make_rng(1)
    assert {sample(probs, rng) for _ in range(2000)} == {1, 3}


def test_the_top_k_found_from_a_subsample_is_the_exact_top_k():
    """A vocabulary-sized row: the candidates found without sorting the whole row are exactly
    argpartition's, ties at the boundary included, whatever the row's order."""
    rng = np.random.default_rng(3)
    for trial in range(20):
        logits = (rng.standard_normal(50_000) * 3).astype(np.float32)
        if trial % 2:
            logits = np.sort(logits)  # the largest logits all at one end: the subsample sees few of them
        logits[rng.integers(0, 50_000, 30)] = logits.max()  # ties at the top
        for k in (1, 40, 500):
            ids = top_ids(logits, k)
            assert len(set(ids.tolist())) == len(ids) == k
            assert np.array_equal(
                np.sort(logits[ids]), np.sort(logits)[-k:]
            )  # ties may pick either id, never a lower value


def test_the_sparse_distribution_is_the_full_vectors_and_draws_the_same_tokens():
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal(20_000) * 2).astype(np.float32)
    params = SamplingParams(temperature=0.8)
    dist = params.dist(logits)
    dense = params.probs(logits)
    assert np.isclose(dense.sum(), 1.0) and len(dist.ids) <= params.top_k
    assert np.allclose(dist.dense(len(logits)), dense)
    first, second = make_rng(11), make_rng(11)
    assert [dist.sample(first) for _ in range(200)] == [sample(dense, second) for _ in range(200)]


def test_residuals_remove_the_proposal_as_speculative_sampling_defines():
    p = dense(np.array([0.5, 0.3, 0.2, 0.0]))
    q = dense(np.array([0.1, 0.6, 0.0, 0.3]))
    assert np.allclose(p.minus(q).dense(4), np.array([0.4, 0.0, 0.2, 0.0]) / 0.6)
    assert np.allclose(p.without(0).dense(4), [0.0, 0.6, 0.4, 0.0])
    assert p.prob(3) == 0.0 and p.prob(1) == pytest.approx(0.3)
    assert p.minus(p) is None


def test_few_survivors_in_python_match_the_numpy_transforms(monkeypatch):
    """Top-k's few survivors are transformed in plain Python, many in numpy: the same distribution."""
    rng = np.random.default_rng(8)
    rows = [(rng.standard_normal(30_000) * s).astype(np.float32) for s in (0.5, 2, 6) for _ in range(3)]
    settings = [
        SamplingParams(temperature=t, top_k=k, top_p=p, min_p=m)
        for t, k, p, m in [(0.8, 40, 0.95, 0.05), (1.3, 100, 1.0, 0.0), (0.5, 20, 0.5, 0.0), (1.0, 200, 1.0, 0.2)]
    ]
    few = [params.dist(row) for params in settings for row in rows]
    monkeypatch.setattr(sampling, "_FEW", 0)
    many = [params.dist(row) for params in settings for row in rows]
    for a, b in zip(few, many):
        assert np.array_equal(a.ids, b.ids) and np.allclose(a.p, b.p, rtol=1e-12, atol=0)
