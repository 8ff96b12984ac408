"""Acceptance of a draft against the target's distributions. Always commits at least one token.

Greedy: accept while the draft token is the target's argmax, then the target's own token.
Sampling (Leviathan et al. / Chen et al.): accept x with probability min(1, p(x)/q(x)); at the first
rejection sample from normalise(max(0, p − q)); after K acceptances a bonus token from p. A
deterministic drafter (q a point mass on x) is the same rule with q(x) = 1. The output is distributed
exactly as p.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .sampling import sample


@dataclass(frozen=True)
class Verdict:
    """Result of verifying one draft: how many draft tokens survived and what to commit."""

    accepted: int
    tokens: list[int]  # accepted draft tokens, then the target's token


def verify_greedy(draft: Sequence[int], target_logits: np.ndarray) -> Verdict:
    """target_logits has len(draft)+1 rows: row i is the target's next-token logits after draft[:i]."""
    choices = np.argmax(target_logits, axis=1)
    accepted = 0
    for token, choice in zip(draft, choices):
        if token != choice:
            break
        accepted += 1
    return Verdict(accepted, list(draft[:accepted]) + [int(choices[accepted])])


def verify_sampling(
    draft: Sequence[int],
    q_rows: Sequence[np.ndarray] | None,
    p_row: Callable[[int], np.ndarray],
    rng: np.random.Generator,
) -> Verdict:
    """Speculative sampling. `p_row(i)` gives the target's probabilities at draft position i (lazy, so
    rows after a rejection are never computed); `q_rows` None means deterministic proposals."""
    for i, token in enumerate(draft):
        p = p_row(i)
        q_token = 1.0 if q_rows is None else float(q_rows[i][token])
        if q_token > 0 and rng.random() * q_token < p[token]:
            continue
        if q_rows is None:
            residual = p.copy()
            residual[token] = 0.0
        else:
            residual = np.maximum(p - q_rows[i], 0.0)
        total = residual.sum()
        replacement = sample(residual / total if total > 0 else p, rng)
        return Verdict(i, list(draft[:i]) + [replacement])
    return Verdict(len(draft), list(draft) + [sample(p_row(len(draft)), rng)])
