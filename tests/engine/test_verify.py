"""Verification rules on synthetic distributions: greedy acceptance, and speculative sampling whose
output must be distributed exactly as p whatever q is."""

from __future__ import annotations

import numpy as np
import pytest
from dists import dense

from specrun.engine.sampling import Dist, SamplingParams, make_rng
from specrun.engine.shortlist import Shortlist
from specrun.engine.verify import verify, verify_greedy, verify_sampling


def logits_with_argmax(*argmaxes: int, n: int = 6) -> np.ndarray:
    rows = np.zeros((len(argmaxes), n))
    for i, a in enumerate(argmaxes):
        rows[i, a] = 5.0
    return rows


def test_greedy_accepts_matching_prefix_then_target_token():
    verdict = verify_greedy([1, 2, 3], logits_with_argmax(1, 2, 4, 0))
    assert verdict.accepted == 2
    assert verdict.tokens == [1, 2, 4]


def test_greedy_full_acceptance_adds_bonus_token():
    verdict = verify_greedy([1, 2], logits_with_argmax(1, 2, 5))
    assert verdict.accepted == 2
    assert verdict.tokens == [1, 2, 5]


def test_greedy_empty_draft_is_plain_decoding():
    verdict = verify_greedy([], logits_with_argmax(3))
    assert (verdict.accepted, verdict.tokens) == (0, [3])


def test_first_rejection_commits_exactly_one_target_token():
    verdict = verify_greedy([4, 4, 4], logits_with_argmax(0, 4, 4, 4))
    assert verdict.tokens == [0]


P = np.array([0.5, 0.2, 0.15, 0.1, 0.05, 0.0])
Q = np.array([0.1, 0.4, 0.1, 0.0, 0.2, 0.2])
P_DIST = dense(P)
DRAWS = 60_000


def empirical_first_token(q: np.ndarray | None, seed: int) -> np.ndarray:
    """Distribution of the first committed token when the draft is sampled from q (or fixed)."""
    rng = make_rng(seed)
    counts = np.zeros(len(P))
    q_dist = None if q is None else dense(q)
    for _ in range(DRAWS):
        if q_dist is None:
            draft, q_rows = [1], None
        else:
            draft, q_rows = [q_dist.sample(rng)], [q_dist]  # as a draft model draws it
        verdict = verify_sampling(draft, q_rows, lambda i: P_DIST, rng)
        counts[verdict.tokens[0]] += 1
    return counts / DRAWS


@pytest.mark.parametrize("q", [Q, None], ids=["sampled-draft", "deterministic-draft"])
def test_sampling_output_is_distributed_as_p(q):
    # Each frequency has standard deviation sqrt(p(1-p)/N) <= 0.0021 for N = 60k; 5 sigma = 0.0103.
    freq = empirical_first_token(q, seed=123)
    assert np.max(np.abs(freq - P)) < 0.0103
    assert freq[5] == 0.0  # a token p forbids is never emitted, even when q proposes it


class Uniforms:
    """A stand-in for the generator that hands out chosen uniforms, to enumerate every outcome."""

    def __init__(self, *values: float):
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0) if self.values else 0.5


@pytest.mark.parametrize("q", [Q, None], ids=["sampled-draft", "deterministic-draft"])
def test_first_token_distribution_by_enumerating_the_uniforms(q):
    """verify_sampling run over a grid of every uniform it draws (acceptance, then the residual
    sample): the first committed token's distribution is p to within the grid's resolution."""
    n = 100
    grid = [(i + 0.5) / n for i in range(n)]
    proposals = [(x, q[x]) for x in range(len(P)) if q[x] > 0] if q is not None else [(1, 1.0)]
    found = np.zeros(len(P))
    for x, weight in proposals:
        q_rows = None if q is None else [dense(q)]
        for u1 in grid:
            verdict = verify_sampling([x], q_rows, lambda i: P_DIST, Uniforms(u1))
            if verdict.accepted:
                found[x] += weight / n
                continue
            for u2 in grid:
                found[verify_sampling([x], q_rows, lambda i: P_DIST, Uniforms(u1, u2)).tokens[0]] += weight / n / n
    assert np.allclose(found, P, atol=0.02), found
    assert found[5] == 0.0


def test_sampling_bonus_token_after_full_acceptance():
    rng = make_rng(0)
    point = Dist.point(1)
    verdict = verify_sampling([1, 1], [point, point], lambda i: point if i < 2 else Dist.point(2), rng)
    assert verdict.accepted == 2 and verdict.tokens == [1, 1, 2]


def test_a_plain_step_takes_its_one_row_alone_or_as_a_block_of_one():
    """With no draft the row may come as it was read (1-D, a Shortlist of lists included): the
    token is the one the block of one gives, greedy and sampled, drawing the same uniforms."""
    row = (np.random.default_rng(2).standard_normal(500) * 3).astype(np.float32)
    top = np.argsort(-row)[:40]
    alone = [row, Shortlist(top.tolist(), row[top].tolist())]
    for sampling in (SamplingParams(temperature=0), SamplingParams(temperature=0.8)):
        for seed in range(20):
            expected = verify([], None, row[None, :], sampling, make_rng(seed))
            for one in alone:
                assert verify([], None, one, sampling, make_rng(seed)) == expected
