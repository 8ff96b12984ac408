"""The speedup speculative decoding should reach, by the model of Leviathan et al. (2023).

Given a per-token acceptance rate α and measured costs, it predicts tokens per target pass and the
resulting speedup over plain decoding. A benchmark divides the speedup it measured by this figure
(efficiency), so losses from overheads the model leaves out — Python, sampling, the draft's
catch-up decodes, the draft's prompt prefill — show up as a number instead of hiding in a speed.
What a step commits and costs is auto's own cost model (engine/auto/cost_model.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..defaults import MODEL
from ..engine.auto.cost_model import Costs, expected_tokens


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


def predicted_speedup(alpha: float, k: int, costs: Costs, drafter: str | None = MODEL) -> float:
    """E(α, K) tokens per step over the step's cost, against plain decoding's one token per plain_s."""
    return expected_tokens(alpha, k) * costs.plain_s / costs.step_seconds(k, drafter)


def predicted_speedup_of_steps(steps: Iterable[tuple], costs: Costs) -> float | None:
    """The same model over the steps a run actually took: (α, tokens drafted, draft seconds) each,
    and optionally (lead rows, lead tokens kept): a constraint's forced tokens at the head of the
    step's draft, which the step verifies beside the draft and keeps as they were kept.

    Equals `predicted_speedup` when every step drafts K; it also covers steps that draft fewer
    (the end of the budget, an empty prompt lookup, an adaptive K). A step with α None or no
    draft counts as one token at the cost of its drafting plus a pass over one token.
    """
    tokens = seconds = 0.0
    for alpha, drafted, draft_s, *lead in steps:
        rows, kept = lead if lead else (0, 0)
        n = drafted if alpha is not None else 0
        tokens += expected_tokens(alpha or 0.0, n) + kept
        seconds += draft_s + costs.step_seconds(n + rows)
    return tokens * costs.plain_s / seconds if seconds > 0 else None


def efficiency(achieved: float | None, predicted: float | None) -> float | None:
    """Achieved over predicted speedup: 1 means the implementation loses nothing the model ignores."""
    if achieved is None or not predicted:
        return None
    return achieved / predicted
