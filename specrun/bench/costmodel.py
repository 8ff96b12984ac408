"""The speedup speculative decoding should reach, by the model of Leviathan et al. (2023).

Given a per-token acceptance rate α and measured costs, it predicts tokens per target pass and the
resulting speedup over plain decoding. A benchmark divides the speedup it measured by this figure
(efficiency), so losses from overheads the model leaves out — Python, sampling, the draft's
catch-up decodes, the draft's prompt prefill — show up as a number instead of hiding in a speed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from ..engine.auto.estimates import CostCurve


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """(1 − α^(K+1)) / (1 − α): tokens one target pass commits when each of K draft tokens is
    accepted independently with probability α (the target always adds one). K + 1 when α = 1."""
    if k <= 0:
        return 1.0
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_from_steps(steps: Iterable[tuple[int, int]]) -> float | None:
    """Per-token acceptance α from (drafted, accepted) per step, or None when nothing was drafted.

    A step judges its first min(drafted, accepted + 1) positions: everything after the first
    rejection is thrown away unjudged. Accepted over judged is the maximum-likelihood α of the
    model's independence assumption; accepted over drafted would count unjudged positions as
    failures and understate α.
    """
    accepted = judged = 0
    for drafted, ok in steps:
        if drafted <= 0:
            continue
        accepted += ok
        judged += min(drafted, ok + 1)
    return accepted / judged if judged else None


@dataclass(frozen=True)
class Costs:
    """Measured seconds: one plain decode, a target pass over a batch of n tokens, one draft token."""

    plain_s: float
    verify_s: Mapping[int, float] = field(default_factory=dict)
    draft_token_s: float = 0.0

    @cached_property
    def curve(self) -> CostCurve:
        """The measured points (plain decoding at batch 1 unless measured) as the controller reads them."""
        return CostCurve.of({1: self.plain_s, **self.verify_s})

    def verify(self, batch: int) -> float:
        """Seconds for a target pass over `batch` tokens: measured, else interpolated between (or
        extrapolated from) the nearest measured sizes, as `auto` estimates it (estimates.CostCurve)."""
        return self.curve(batch)


def on_a_gpu(costs: Costs) -> Costs:
    """The same machine's costs as a GPU would shape them: a target pass over any batch a step
    verifies costs what a single token does (the weights are read once per pass either way), and a
    draft token keeps its share of a target token. What speculation would give there, from this
    machine's measured acceptance and draft costs; a prediction, not a measurement."""
    return Costs(costs.plain_s, {n: costs.plain_s for n in costs.verify_s}, costs.draft_token_s)


def step_seconds(costs: Costs, k: int, draft_s: float | None = None) -> float:
    """Cost of one speculative step: K draft tokens (or `draft_s` when given) plus a pass over K + 1."""
    drafting = k * costs.draft_token_s if draft_s is None else draft_s
    return drafting + costs.verify(k + 1)


def predicted_speedup(alpha: float, k: int, costs: Costs, draft_s: float | None = None) -> float:
    """E(α, K) tokens per step over the step's cost, against plain decoding's one token per plain_s."""
    return expected_tokens_per_step(alpha, k) * costs.plain_s / step_seconds(costs, k, draft_s)


def predicted_speedup_of_steps(steps: Iterable[tuple[float | None, int, float]], costs: Costs) -> float | None:
    """The same model over the steps a run actually took: (α, tokens drafted, draft seconds) each.

    Equals `predicted_speedup` when every step drafts K; it also covers steps that draft fewer
    (the end of the budget, an empty prompt lookup, an adaptive K). A step with α None or no
    draft counts as one token at the cost of its drafting plus a pass over one token.
    """
    tokens = seconds = 0.0
    for alpha, drafted, draft_s in steps:
        n = drafted if alpha is not None else 0
        tokens += expected_tokens_per_step(alpha or 0.0, n)
        seconds += draft_s + costs.verify(n + 1)
    return tokens * costs.plain_s / seconds if seconds > 0 else None


def efficiency(achieved: float | None, predicted: float | None) -> float | None:
    """Achieved over predicted speedup: 1 means the implementation loses nothing the model ignores."""
    if achieved is None or not predicted:
        return None
    return achieved / predicted
