"""Acceptance of a draft against the target's distributions. Always commits at least one token.

Terms, for one sequence and one step: the draft has K tokens; `accepted` of them are kept; then
one token of the target's own follows: the replacement at the first rejection, or the bonus
token after K acceptances. Output tokens = accepted + 1.

Greedy: accept while the draft token is the target's argmax, then the target's own token.
Sampling (Leviathan et al. / Chen et al.): accept x with probability min(1, p(x)/q(x)); at the first
rejection sample from normalise(max(0, p − q)); after K acceptances a bonus token from p. A
deterministic drafter (q a point mass on x) is the same rule with q(x) = 1, its residual p with x
removed. The output is distributed exactly as p.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .sampling import Dist, Rng, SamplingParams
from .shortlist import argmax_rows


@dataclass(frozen=True)
class Verdict:
    """Result of verifying one draft: how many draft tokens survived and what to commit."""

    accepted: int
    tokens: list[int]  # accepted draft tokens, then the target's token


def verify_greedy(draft: Sequence[int], target_logits) -> Verdict:
    """target_logits has len(draft)+1 rows (full rows or a Shortlist): row i is the target's
    next-token logits after draft[:i]."""
    choices = argmax_rows(target_logits)
    accepted = 0
    for token, choice in zip(draft, choices):
        if token != choice:
            break
        accepted += 1
    return Verdict(accepted, list(draft[:accepted]) + [int(choices[accepted])])


def verify_sampling(
    draft: Sequence[int],
    q_rows: Sequence[Dist] | None,
    p_row: Callable[[int], Dist],
    rng: Rng,
) -> Verdict:
    """Speculative sampling. `p_row(i)` gives the target's distribution at draft position i (lazy,
    so rows after a rejection are never computed); `q_rows` None means deterministic proposals."""
    for i, token in enumerate(draft):
        p = p_row(i)
        q_token = 1.0 if q_rows is None else q_rows[i].prob(token)
        if q_token > 0 and rng.random() * q_token < p.prob(token):
            continue
        residual = p.without(token) if q_rows is None else p.minus(q_rows[i])
        return Verdict(i, list(draft[:i]) + [(residual or p).sample(rng)])
    return Verdict(len(draft), list(draft) + [p_row(len(draft)).sample(rng)])


def verify(
    draft: Sequence[int], q_rows: Sequence[Dist] | None, rows: np.ndarray, sampling: SamplingParams, rng: Rng
) -> Verdict:
    """The one verification of a step's `[last] + draft` rows (shape (len(draft) + 1, n_vocab), or
    their Shortlist; with no draft, the one row may come alone): greedy or speculative sampling,
    as the sequence samples. A plain step is the target's own token, as either rule gives it."""
    if not draft:
        return Verdict(0, [sampling.pick(only_row(rows), rng)])
    if sampling.greedy:
        return verify_greedy(draft, rows)
    return verify_sampling(draft, q_rows, lambda i: sampling.dist(rows[i]), rng)


def only_row(rows):
    """The one row of a plain step: given alone (1-D), or as a block of one."""
    return rows[0] if len(rows.shape) == 2 else rows


Verifier = Callable[[Sequence[int], "Sequence[Dist] | None", np.ndarray, SamplingParams, Rng], Verdict]


class SyntheticAcceptance:
    """A stand-in for `verify` that measures the pipeline, not the model: each draft position is
    accepted independently with probability `p` (its own seeded generator, so a run repeats),
    up to the first rejection; the target's own token (as the sequence samples) follows. The
    draft and target passes still run at their real sizes, so a benchmark times a pair at a
    chosen acceptance, e.g. on random weights that would otherwise accept nothing. Its output is
    not the model's: it is never compared with plain decoding nor learned from."""

    synthetic = True

    def __init__(self, p: float, seed: int = 0):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"synthetic acceptance must lie in [0, 1], got {p}")
        self.p = p
        self.rng = np.random.default_rng([seed, 0x5EC])

    def __call__(
        self, draft: Sequence[int], q_rows: Sequence[Dist] | None, rows: np.ndarray, sampling: SamplingParams, rng: Rng
    ) -> Verdict:
        if not draft:
            return Verdict(0, [sampling.pick(only_row(rows), rng)])
        accepted = 0
        while accepted < len(draft) and self.rng.random() < self.p:
            accepted += 1
        return Verdict(accepted, list(draft[:accepted]) + [sampling.pick(rows[accepted], rng)])
