"""What a machine's decode costs imply: the acceptance a drafter needs before speculation pays.

With t1 a plain decode, t_verify(n) a target pass over n tokens and t_draft a draft-model token, a
step that drafts K tokens commits E(α, K) tokens on average and costs K·t_draft + t_verify(K+1)
(auto's cost model, engine/auto/cost_model.py), where plain decoding would have spent E(α, K)·t1. The
break-even α is where the two are equal. E grows with α from 1 (α = 0) to K + 1 (α = 1), so it is
found by bisection, and when even α = 1 loses the drafter can never pay at that K. Prompt lookup
drafts for free, so for it t_draft = 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..defaults import LOOKUP, MODEL
from ..engine.auto.cost_model import Costs, expected_tokens
from .costmodel import predicted_speedup

DRAFT_KS = tuple(range(1, 9))
LOOKUP_KS = tuple(range(1, 32))
TYPICAL_ALPHA = {"code": 0.9, "prose": 0.6}  # per-token acceptance a good draft model reaches
COPY_ALPHA = 0.95  # prompt lookup's acceptance on text that copies its prompt (edits, refactors)


def break_even_alpha(costs: Costs, k: int, drafter: str | None) -> float | None:
    """The per-token acceptance at which drafting K tokens costs what it saves; None: never pays."""
    cost = costs.step_seconds(k, drafter)
    if expected_tokens(1.0, k) * costs.plain_s < cost:
        return None
    low, high = 0.0, 1.0
    if expected_tokens(low, k) * costs.plain_s >= cost:
        return 0.0
    for _ in range(60):
        middle = (low + high) / 2
        if expected_tokens(middle, k) * costs.plain_s < cost:
            low = middle
        else:
            high = middle
    return high


@dataclass(frozen=True)
class Best:
    """The K with the best predicted speedup at some α (0: plain decoding is best)."""

    k: int
    speedup: float

    def to_dict(self) -> dict:
        return {"k": self.k, "speedup": round(self.speedup, 3)}


def best(costs: Costs, alpha: float, drafter: str | None, ks: Iterable[int]) -> Best:
    """The best K at acceptance α, plain decoding (K = 0, speedup 1) included."""
    choice = Best(0, 1.0)
    for k in ks:
        value = predicted_speedup(alpha, k, costs, drafter)
        if value > choice.speedup:
            choice = Best(k, value)
    return choice


def lookup_pays_from(costs: Costs, alpha: float = COPY_ALPHA, ks: Iterable[int] = LOOKUP_KS) -> int | None:
    """The shortest prompt-lookup draft that pays at acceptance α; None when none does."""
    for k in ks:
        if predicted_speedup(alpha, k, costs, LOOKUP) > 1.0:
            return k
    return None


@dataclass(frozen=True)
class BreakEven:
    """Break-even acceptances by K for the draft model and prompt lookup, and what to expect."""

    draft: dict[int, float | None] | None  # None: no draft model measured
    lookup: dict[int, float | None]
    lookup_from: int | None
    expected: dict[str, dict[str, Best]]  # "code"/"prose" → "draft"/"lookup" → best K and speedup
    draft_step_at_4: float | None  # a K=4 draft-model step in plain decodes (what α = 1 has to beat: 5)

    def to_dict(self) -> dict:
        def alphas(table: dict[int, float | None]) -> list[dict]:
            return [{"k": k, "alpha": None if a is None else round(a, 4)} for k, a in table.items()]

        return {
            "draft": alphas(self.draft) if self.draft is not None else None,
            "lookup": alphas(self.lookup),
            "lookup_pays_from_k": self.lookup_from,
            "copy_alpha": COPY_ALPHA,
            "expected_speedup": {
                kind: {"alpha": TYPICAL_ALPHA[kind], **{name: b.to_dict() for name, b in rows.items()}}
                for kind, rows in self.expected.items()
            },
        }


def verdict(costs: Costs, drafter: str = MODEL) -> BreakEven:
    """Everything the costs imply for `drafter` (its rows only when its token cost was measured) and
    prompt lookup."""
    has_draft = costs.draft_seconds(drafter, 1) > 0
    draft = {k: break_even_alpha(costs, k, drafter) for k in DRAFT_KS} if has_draft else None
    lookup = {k: break_even_alpha(costs, k, LOOKUP) for k in DRAFT_KS}
    expected = {
        kind: {
            **({"draft": best(costs, alpha, drafter, DRAFT_KS)} if has_draft else {}),
            "lookup": best(costs, alpha, LOOKUP, LOOKUP_KS),
        }
        for kind, alpha in TYPICAL_ALPHA.items()
    }
    step4 = costs.step_seconds(4, drafter) / costs.plain_s if has_draft else None
    return BreakEven(draft, lookup, lookup_pays_from(costs), expected, step4)


def sentence(result: BreakEven, *, gpu: bool) -> str:
    """The verdict in words a user can act on."""
    parts = []
    if result.draft is not None:
        paying = {k: a for k, a in result.draft.items() if a is not None}
        if not paying:
            parts.append(
                f"the draft model cannot pay here: even if every drafted token were accepted, a K=4 step costs "
                f"{result.draft_step_at_4:.1f} plain tokens' time and yields at most 5"
            )
        else:
            k, alpha = min(paying.items(), key=lambda item: item[1])
            code = result.expected["code"]["draft"]
            when = f"once {alpha:.0%} of its tokens are accepted" if alpha > 0 else "at any acceptance"
            parts.append(
                f"the draft model pays {when} (K={k}); at 90% (code) expect "
                f"{code.speedup:.2f}× with K={code.k}, at 60% (prose) {result.expected['prose']['draft'].speedup:.2f}×"
            )
    if result.lookup_from is None:
        parts.append("prompt lookup cannot pay either, even on text that copies its prompt")
    else:
        parts.append(
            f"prompt lookup pays on text that copies its prompt from {result.lookup_from} drafted "
            f"token{'s' if result.lookup_from > 1 else ''} on"
        )
    text = "On this machine " + "; ".join(parts) + "."
    if not gpu:
        text += " On a GPU a pass over K+1 tokens costs about what one does, and that is where a draft model pays."
    return text[0].upper() + text[1:]
