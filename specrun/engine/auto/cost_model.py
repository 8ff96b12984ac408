"""The cost model of speculation, once for auto and the benchmarks: what a step commits, and what it
costs.

A step that drafts k tokens commits `expected_tokens` (the target always adds one) and costs its
drafting plus one target pass over k + 1 tokens (`Costs.step_seconds`). Speculation pays where the
first divided by the second beats plain decoding's one token per `Costs.plain_s`. Auto weighs every
option of every step this way (plan.py, control.py); the benchmarks predict what a run should
reach and what acceptance a drafter needs to pay (bench/costmodel.py, bench/break_even.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .estimates import CostCurve

Curve = Callable[[int], float]


def survival(acceptance: Iterable[float]) -> list[float]:
    """The chance that the first j draft tokens are all accepted, for j = 1..len(acceptance):
    Π_{i≤j} a_i, where a_i is the chance that position i is accepted given that all before it
    were. Position j adds this much to a step's expected tokens."""
    out, survive = [], 1.0
    for rate in acceptance:
        survive *= rate
        out.append(survive)
    return out


def expected_tokens(acceptance: float | Sequence[float], k: int) -> float:
    """Tokens one step commits on average when it drafts k: 1 + Σ_{j≤k} Π_{i≤j} a_i (see
    `survival`). One number α stands for every position: (1 − α^(k+1)) / (1 − α), and k + 1 at
    α = 1."""
    if not isinstance(acceptance, Sequence):
        if not 0.0 <= acceptance <= 1.0:
            raise ValueError(f"acceptance must lie in [0, 1], got {acceptance}")
        acceptance = [float(acceptance)] * max(k, 0)
    total = 1.0
    for reached in survival(acceptance[: max(k, 0)]):
        total += reached
    return total


@dataclass(frozen=True)
class Costs:
    """Seconds of a target pass over n tokens (`verify`), of each pass-running drafter's pass over
    n rows (`draft`), and, for a drafter whose passes are not timed, of drafting m tokens for one
    sequence (`drafting`). A drafter in neither, prompt lookup, drafts for free. A pass-running
    drafter drafts m tokens in m one-row passes, or, for one in `blocks` (a DFlash head), in one
    pass over its last token and m masks."""

    verify: Curve
    draft: Mapping[str, Curve] = field(default_factory=dict)
    drafting: Mapping[str, Curve] = field(default_factory=dict)
    blocks: frozenset[str] = frozenset()  # pass-running drafters that draft m tokens in one pass over m + 1 rows

    @classmethod
    def measured(cls, verify_s: Mapping[int, float], draft_token_s: Mapping[str, float] | None = None) -> Costs:
        """From measured points: target pass seconds by batch size (read between and beyond them as
        auto reads them, estimates.CostCurve) and per drafter the seconds of one draft token."""
        per_token = {name: _per_token(seconds) for name, seconds in (draft_token_s or {}).items() if seconds}
        return cls(CostCurve.of(dict(verify_s)), per_token)

    @property
    def plain_s(self) -> float:
        """Seconds of plain decoding's step: a target pass over one token."""
        return self.verify(1)

    def draft_seconds(self, drafter: str | None, m: int) -> float:
        """Seconds to draft m tokens for one sequence: m one-row passes, or what its drafts cost."""
        if drafter is None or m <= 0:
            return 0.0
        if drafter in self.draft:
            return self.draft[drafter](m + 1) if drafter in self.blocks else m * self.draft[drafter](1)
        return self.drafting[drafter](m) if drafter in self.drafting else 0.0

    def step_seconds(self, k: int, drafter: str | None = None) -> float:
        """One sequence's step drafting k tokens with `drafter`: its drafting and a target pass over k + 1."""
        return self.draft_seconds(drafter, k) + self.verify(k + 1)

    def on_a_gpu(self) -> Costs:
        """The same costs as a GPU shapes them: a target pass over any batch a step verifies costs
        what a single token does (the weights are read once per pass either way), and a draft
        token keeps its share of a target token. A prediction, not a measurement."""
        plain = self.plain_s
        return Costs(lambda n: plain, self.draft, self.drafting, self.blocks)

    def remembered(self) -> Costs:
        """These costs with the target pass read once per size: for a caller that weighs many
        options against curves that stay as they are meanwhile."""
        seen: dict[int, float] = {}
        verify = self.verify

        def once(n: int) -> float:
            if n not in seen:
                seen[n] = verify(n)
            return seen[n]

        return Costs(once, self.draft, self.drafting, self.blocks)


def _per_token(seconds: float) -> Curve:
    return lambda rows: rows * seconds
