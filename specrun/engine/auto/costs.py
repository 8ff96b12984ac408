"""What decoding costs on this machine: a target pass by batch size, a draft token.

Speculation pays only where verifying K+1 tokens costs much less than K+1 single passes, and that
curve is a property of the hardware and build, not of the text: on one 2-core CPU a pass over 16
tokens cost 7× a single one but a pass over 15 cost 9×. Measuring it once lets `auto` decide from
its first step instead of learning the curve by trial.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..llama import Context

# Batch sizes timed for auto: small drafts, and either side of the sizes where llama.cpp's batched
# kernels change (on one CPU 16 and 32 tokens cost less than 15 and 31).
CALIBRATION_SIZES = (1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 31, 32)
CALIBRATION_REPS = 2


@dataclass
class DecodeCosts:
    """Median seconds of a target pass by batch size, and of one draft-model token."""

    verify_s: dict[int, float]
    draft_token_s: float | None = None

    def to_dict(self) -> dict:
        return {"verify_s": {str(k): v for k, v in self.verify_s.items()}, "draft_token_s": self.draft_token_s}

    @classmethod
    def from_dict(cls, data: dict) -> "DecodeCosts":
        return cls({int(k): float(v) for k, v in data["verify_s"].items()}, data.get("draft_token_s"))


def time_batches(ctx: Context, tokens: Sequence[int], sizes: Sequence[int], reps: int) -> dict[int, float]:
    """Median seconds of ctx.decode over a batch of each size, on top of `tokens` as context.

    Sizes are interleaved within each repetition and the cache is trimmed back after every pass,
    so each one sees the same context length. The cache is left holding `tokens`.
    """
    ctx.trim(0)
    ctx.decode(list(tokens), "none")
    base = len(ctx.tokens)
    filler = list(tokens) * (max(sizes) // max(len(tokens), 1) + 1)
    times: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(reps):
        for size in sizes:
            start = time.perf_counter()
            ctx.decode(filler[:size], "all" if size > 1 else "last")
            times[size].append(time.perf_counter() - start)
            ctx.trim(base)
    return {size: float(np.median(values)) for size, values in times.items()}


def measure(target: Context, draft: Context | None, tokens: Sequence[int], sizes: Sequence[int] = CALIBRATION_SIZES,
            reps: int = CALIBRATION_REPS) -> DecodeCosts:
    """Time the target by batch size and the draft per token; both caches are emptied afterwards."""
    sizes = [s for s in sizes if len(tokens) + s <= target.n_ctx]
    try:
        verify = time_batches(target, tokens, sizes, reps)
        draft_s = time_batches(draft, tokens, [1], reps)[1] if draft is not None else None
    finally:
        target.trim(0)
        if draft is not None:
            draft.trim(0)
    return DecodeCosts(verify, draft_s)
