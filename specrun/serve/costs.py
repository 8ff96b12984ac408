"""What a step costs on this machine: a target pass by the total tokens in its batch, and a draft
pass by its tokens. Measured by a short calibration at startup, then kept current by every step.

The allocation of draft tokens needs the whole batch's cost curve, not one request's: on a CPU a
pass over 8 tokens costs several single ones, so four requests decoding plain already fill a batch
whose next tokens are dear, while on a GPU the same pass costs about what one token does.

The calibration gives the curve's shape (one sequence, a short context); live steps give its
scale. Learning each size on its own would mix the two: the size every plain step has (one row per
request) would follow the growing contexts of a busy server while sizes seldom seen kept their
short-context costs, and drafting would look cheaper than it is. So every step's measured seconds,
over the shape's seconds at its size, move one scale that applies to every size. Beyond the largest
size measured, the shape grows at the rate of its upper half (a tile's dip at the very end, where
a pass over 32 tokens costs less than one over 31, says nothing about 64).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..engine.auto.costs import CALIBRATION_SIZES, time_batches
from ..engine.auto.estimates import CostCurve
from ..engine.batch import SharedContext
from ..engine.llama import Model
from .budget import Costs

CALIBRATION_REPS = 3  # the fastest of three: a size's first pass can be slow (its graph is built), and on a shared
# machine another process can stall any pass; neither is the cost of a pass
CALIBRATION_TEXT = "The quick brown fox jumps over the lazy dog. " * 8
MAX_CALIBRATED = 64  # larger batches are extrapolated
SCALE_DECAY = 0.9  # weight of the past in the live scale
LEARNED_BEYOND = 2  # passes up to twice the largest measured size move the scale
SCALE_STEP = 2.0  # one step moves the scale by at most this factor: a stalled pass is not the machine's speed


def verify_sizes(parallel: int, limit: int) -> list[int]:
    """Batch sizes to time: auto's (small drafts, the edges of CPU tiles) and multiples of the
    number of requests decoded together, up to `limit`."""
    sizes = set(CALIBRATION_SIZES) | {48, 64, parallel, parallel + 1, 2 * parallel, 4 * parallel, 8 * parallel}
    return sorted(s for s in sizes if 1 <= s <= min(limit, MAX_CALIBRATED))


def draft_sizes(parallel: int) -> list[int]:
    return sorted({1, 2, 4, parallel, 2 * parallel} - {0})


class ScaledCurve:
    """Seconds by size: a measured shape times a live scale (see the module docstring)."""

    def __init__(self, points: dict[int, float] | None = None, *, decay: float = SCALE_DECAY):
        self.shape = CostCurve.of(points or {})
        self.scale = 1.0
        self.decay = decay
        self.observed = 1  # the calibration counts as one observation at scale 1

    def __bool__(self) -> bool:
        return bool(self.shape)

    def shaped(self, size: int) -> float:
        """The shape's seconds at `size`, extended beyond the largest measured size."""
        sizes = sorted(self.shape.points())
        top = sizes[-1]
        if size <= top:
            return self.shape(size)
        mid = max(1, top // 2)
        slope = max(0.0, (self.shape(top) - self.shape(mid)) / (top - mid)) if top > mid else self.shape(top) / top
        return self.shape(top) + slope * (size - top)

    def __call__(self, size: int) -> float:
        return self.scale * self.shaped(size)

    def add(self, size: int, seconds: float) -> None:
        """Fold in one measured pass (the first one defines the shape when nothing was calibrated).
        Passes far beyond the measured sizes (a draft model reading a whole prompt) say more about
        the extrapolation than about the machine's speed, and are left out."""
        if not self.shape:
            self.shape.add(size, seconds)
            return
        if size > LEARNED_BEYOND * max(self.shape.points()):
            return
        ratio = min(max(seconds / max(self.shaped(size), 1e-12), self.scale / SCALE_STEP), self.scale * SCALE_STEP)
        self.observed += 1
        rate = max(1.0 / self.observed, 1.0 - self.decay)
        self.scale += rate * (ratio - self.scale)

    def points(self) -> dict[int, float]:
        """The measured sizes at the current scale."""
        return {size: self.scale * seconds for size, seconds in self.shape.points().items()}


@dataclass
class BatchCosts:
    """Cost curves: seconds of a target pass by total batch size, and of a draft pass by its tokens."""

    verify: ScaledCurve
    draft: ScaledCurve

    @classmethod
    def of(cls, verify: dict[int, float], draft: dict[int, float] | None = None) -> "BatchCosts":
        return cls(ScaledCurve(verify), ScaledCurve(draft))

    def costs(self) -> Costs:
        """The curves as the allocation reads them (no draft curve before a draft pass was timed)."""
        return Costs(self.verify, self.draft if self.draft else None)

    def prompt_token_seconds(self, n_batch: int) -> float:
        """Seconds per prompt token when prompts are read in full batches."""
        return self.verify(n_batch) / n_batch

    def points(self) -> dict:
        """The calibrated shapes and the live scales, as JSON."""
        return {"verify_s": {str(k): round(v, 6) for k, v in self.verify.shape.points().items()},
                "draft_s": {str(k): round(v, 6) for k, v in self.draft.shape.points().items()} or None,
                "verify_scale": round(self.verify.scale, 4), "draft_scale": round(self.draft.scale, 4)}


def fastest(ctx: SharedContext, seq: int, tokens: Sequence[int], sizes: Sequence[int], reps: int) -> dict[int, float]:
    """The fastest of `reps` timings of a pass over each size (sizes interleaved in each round)."""
    rounds = [time_batches(ctx.view(seq), tokens, sizes, 1) for _ in range(reps)]
    return {size: min(r[size] for r in rounds) for size in sizes}


def calibrate(target: SharedContext, draft: SharedContext | None, tokens: Sequence[int], *, parallel: int, seq: int = 0,
              reps: int = CALIBRATION_REPS) -> BatchCosts:
    """Time target passes of every size in verify_sizes and draft passes of draft_sizes on one
    sequence of each context (emptied afterwards), on top of `tokens` as context."""
    limit = target.n_ctx_seq - len(tokens)
    try:
        verify = fastest(target, seq, tokens, verify_sizes(parallel, limit), reps)
        timed = fastest(draft, seq, tokens, [s for s in draft_sizes(parallel) if s <= limit], reps) if draft else None
    finally:
        target.clear(seq)
        if draft is not None:
            draft.clear(seq)
    return BatchCosts.of(verify, timed)


def measure(target: Model, draft: Model | None, *, parallel: int, ctx_size: int, threads: int, n_batch: int) -> BatchCosts:
    """Calibrate on contexts made for the purpose, for several engines that share one measurement
    (the bench, whose servers are then compared from the same starting costs)."""
    contexts = [SharedContext(m, n_seq=1, n_ctx_seq=ctx_size, n_threads=threads, n_batch=n_batch) for m in (target, draft) if m is not None]
    try:
        tokens = target.tokenize(CALIBRATION_TEXT, add_special=True, parse_special=False)[:48]
        return calibrate(contexts[0], contexts[1] if len(contexts) > 1 else None, tokens, parallel=parallel)
    finally:
        for ctx in contexts:
            ctx.close()
