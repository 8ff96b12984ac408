"""What a step costs on this machine: a target pass by the total tokens in its batch, and a draft
pass by its tokens. Seeded by a short calibration at startup, then learned from every step.

The allocation of draft tokens needs the whole batch's cost curve, not one request's: on a CPU a
pass over 8 tokens costs several single ones, so four requests decoding plain already fill a batch
whose next tokens are dear, while on a GPU the same pass costs about what one token does.
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
MAX_CALIBRATED = 64  # larger batches are extrapolated, then learned as they happen


def verify_sizes(parallel: int, limit: int) -> list[int]:
    """Batch sizes to time: auto's (small drafts, the edges of CPU tiles) and multiples of the
    number of requests decoded together, up to `limit`."""
    sizes = set(CALIBRATION_SIZES) | {parallel, parallel + 1, 2 * parallel, 4 * parallel, 8 * parallel}
    return sorted(s for s in sizes if 1 <= s <= min(limit, MAX_CALIBRATED))


def draft_sizes(parallel: int) -> list[int]:
    return sorted({1, 2, 4, parallel, 2 * parallel} - {0})


@dataclass
class BatchCosts:
    """Running cost curves: seconds of a target pass by total batch size, and of a draft pass."""

    verify: CostCurve
    draft: CostCurve | None = None

    @classmethod
    def of(cls, verify: dict[int, float], draft: dict[int, float] | None = None) -> "BatchCosts":
        return cls(CostCurve.of(verify), CostCurve.of(draft) if draft else None)

    def costs(self) -> Costs:
        """The curves as the allocation reads them."""
        return Costs(self.verify, self.draft if self.draft else None)

    def prompt_token_seconds(self, n_batch: int) -> float:
        """Seconds per prompt token when prompts are read in full batches."""
        return self.verify(n_batch) / n_batch

    def points(self) -> dict:
        return {"verify_s": {str(k): round(v, 6) for k, v in self.verify.points().items()},
                "draft_s": {str(k): round(v, 6) for k, v in self.draft.points().items()} if self.draft else None}


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
