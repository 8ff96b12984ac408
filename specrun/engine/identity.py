"""Is a greedy output exactly what the target would produce? Checked against the target's own logits.

One batched pass over prompt + output gives the target's next-token logits at every position of
the output. A greedy token must be that row's argmax, or within `tolerance` logits of it: batched
and single-token passes use different kernels, so where the top candidates are nearly tied the
argmax may flip (a near-tie, reported with the rank and gap of the token chosen). Anything else is
a violation: a token the target would not have produced. Every position is checked, not only up
to the first difference from another run, so a bug after a tie cannot hide.

The noise is first measured on the prompt's last tokens. It grows along an output (each cached
position was itself computed by one kernel or the other, and the differences add up), so an output
with a finding beyond that tolerance is judged again against the noise measured along the output
itself: the same tokens decoded one at a time and in one pass, whichever tokens were chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .llama import Context

NEAR_TIE_LOGITS = 0.1  # the least tolerance: a flip within this is arithmetic, not a bug
NOISE_TAIL = 8  # tokens decoded alone and in one batch to measure the arithmetic's noise


@dataclass(frozen=True)
class RankedToken:
    """A token as the target's logits at one position rank it."""

    token: int
    rank: int  # 1: the argmax
    gap: float  # logits below the argmax (0 for the argmax)

    def to_dict(self) -> dict:
        return {"token": self.token, "rank": self.rank, "gap": round(self.gap, 4)}


@dataclass(frozen=True)
class Finding:
    """A position whose token is not the argmax: the token chosen and the argmax, both ranked."""

    position: int
    chosen: RankedToken
    top: RankedToken

    def to_dict(self) -> dict:
        return {"position": self.position, "chosen": self.chosen.to_dict(), "top": self.top.to_dict()}


@dataclass
class IdentityCheck:
    """The verdict on one output: positions checked, near-ties, violations."""

    checked: int = 0
    tolerance: float = NEAR_TIE_LOGITS
    ties: list[Finding] = field(default_factory=list)
    violations: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict:
        return {
            "checked": self.checked,
            "tolerance": round(self.tolerance, 4),
            "ties": [f.to_dict() for f in self.ties],
            "violations": [f.to_dict() for f in self.violations],
        }


def rank(row: np.ndarray, token: int) -> RankedToken:
    """Where `token` stands in one row of logits."""
    value = row[token]
    return RankedToken(int(token), 1 + int(np.count_nonzero(row > value)), float(row.max() - value))


def check_rows(rows: np.ndarray, output: Sequence[int], tolerance: float = NEAR_TIE_LOGITS) -> IdentityCheck:
    """Judge every token of `output` against the row of logits that predicts it."""
    result = IdentityCheck(checked=len(output), tolerance=tolerance)
    for position, (row, token) in enumerate(zip(rows, output)):
        top = int(np.argmax(row))
        if token == top:
            continue
        finding = Finding(position, rank(row, token), RankedToken(top, 1, 0.0))
        (result.ties if finding.chosen.gap <= tolerance else result.violations).append(finding)
    return result


def output_rows(ctx: Context, prompt: Sequence[int], output: Sequence[int], seq: int = 0) -> np.ndarray:
    """The target's logits for every output position, from one batched pass (in n_batch chunks)
    over the prompt and the output, on sequence `seq`. The cache is left holding the prompt but its
    last token, so several outputs of one prompt share that prefill."""
    if not prompt:
        raise ValueError("an output is checked after a prompt of at least one token")
    ctx.shortlist(seq, 0)  # whole rows: they are compared with each other
    head = list(prompt[:-1])
    keep = ctx.common_prefix(seq, head)
    ctx.trim(seq, keep)
    if keep < len(head):
        ctx.feed(seq, head[keep:], "none")
    if not output:
        return np.zeros((0, ctx.model.n_vocab), dtype=np.float32)
    try:
        return ctx.feed(seq, [prompt[-1], *output[:-1]], "all")
    finally:
        ctx.trim(seq, len(head))


def logit_noise(ctx: Context, tokens: Sequence[int], seq: int = 0, tail: int = NOISE_TAIL) -> float:
    """Largest change of a top-5 logit between a token decoded alone and inside a batch, over the
    last `tail` tokens: how far batching moves the target's logits on this machine. The sequence's
    cache is emptied afterwards."""
    tokens = list(tokens)
    tail = tokens[-tail:] if len(tokens) > tail else tokens[1:]
    if not tail:
        return 0.0
    ctx.clear(seq)
    ctx.shortlist(seq, 0)  # whole rows: their top 5 are compared
    try:
        head = tokens[: len(tokens) - len(tail)]
        if head:
            ctx.feed(seq, head, "none")
        base = len(ctx.tokens[seq])
        alone = np.stack([ctx.feed(seq, [t], "last") for t in tail])
        ctx.trim(seq, base)
        batched = ctx.feed(seq, tail, "all")
    finally:
        ctx.clear(seq)
    top = np.argpartition(alone, -5, axis=1)[:, -5:]
    rows = np.arange(len(tail))[:, None]
    return float(np.max(np.abs(alone[rows, top] - batched[rows, top])))


def tolerance_from_noise(noise: float) -> float:
    """Each of two logits may move by the noise: a flip within twice it (never under
    NEAR_TIE_LOGITS) is a near-tie."""
    return max(NEAR_TIE_LOGITS, 2.0 * noise)


def output_noise(ctx: Context, prompt: Sequence[int], output: Sequence[int], seq: int = 0) -> float:
    """logit_noise over the rows that predict `output`'s tokens (empties the sequence's cache)."""
    if not output:
        return 0.0
    return logit_noise(ctx, [*prompt, *output[:-1]], seq, tail=len(output))


def judge_rows(
    rows: np.ndarray, output: Sequence[int], tolerance: float, noise_along: Callable[[], float]
) -> IdentityCheck:
    """check_rows, and where that finds a violation, again at the tolerance of `noise_along()`
    (the noise measured along this output, when it exceeds the first)."""
    result = check_rows(rows, output, tolerance)
    if result.violations:
        wider = tolerance_from_noise(noise_along())
        if wider > tolerance:
            result = check_rows(rows, output, wider)
    return result


def check_output(
    ctx: Context, prompt: Sequence[int], output: Sequence[int], tolerance: float, seq: int = 0
) -> IdentityCheck:
    """One greedy output against the target's own logits (see module docstring)."""
    rows = output_rows(ctx, prompt, output, seq)
    return judge_rows(rows, output, tolerance, lambda: output_noise(ctx, prompt, output, seq))
