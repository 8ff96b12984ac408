"""Drafters propose continuations for the target to verify. This module holds the interface and the
draft-model drafter; model-free drafters live beside it.

A drafter is a function of the token history: it gets the whole history each step and keeps its own
state (the draft model reuses the longest cached prefix), so the loop never has to tell it what was
rejected.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from .llama import Context
from .sampling import SamplingParams, sample


@dataclass
class Draft:
    """A proposal: tokens, and the q rows they were sampled from (None: a deterministic proposal)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[np.ndarray] | None = None
    confidence: list[float] | None = None


class Drafter(Protocol):
    """Anything that proposes up to k tokens for a history and learns how many were accepted."""

    name: str

    def propose(self, history: Sequence[int], k: int) -> Draft: ...

    def feedback(self, drafted: int, accepted: int) -> None: ...


def top_probability(logits: np.ndarray) -> float:
    """Softmax probability of the argmax, without materialising the distribution."""
    shifted = logits - logits.max()
    return float(1.0 / np.exp(shifted).sum())


class ModelDrafter:
    """A small model with the target's vocabulary, drafting token by token in its own KV cache.

    Drafting stops early when the draft's top probability falls below `p_min` (after `min_draft`
    tokens): an unsure draft is likely rejected and costs a draft decode per token.
    """

    name = "draft"

    def __init__(
        self,
        ctx: Context,
        sampling: SamplingParams,
        rng: np.random.Generator,
        *,
        p_min: float = 0.0,
        min_draft: int = 0,
    ):
        self.ctx = ctx
        self.sampling = sampling
        self.rng = rng
        self.p_min = p_min
        self.min_draft = min_draft
        self.seconds = 0.0
        self.tokens_drafted = 0

    def sync(self, history: Sequence[int]) -> np.ndarray:
        """Bring the cache in line with history (reusing the common prefix) and return next-token logits."""
        keep = self.ctx.common_prefix(history)
        if keep == len(history):
            keep -= 1  # the last position must be decoded again for its logits
        self.ctx.trim(keep)
        return self.ctx.decode(list(history[keep:]), "last")

    def prefill(self, prompt: Sequence[int]) -> None:
        """Feed the prompt alongside the target's prefill, so the first draft only adds one token."""
        keep = self.ctx.common_prefix(prompt)
        self.ctx.trim(keep)
        if keep < len(prompt):
            self.ctx.decode(list(prompt[keep:]), "none")

    def propose(self, history: Sequence[int], k: int) -> Draft:
        start = time.perf_counter()
        draft = Draft(probs=None if self.sampling.greedy else [], confidence=[])
        if k > 0:
            logits = self.sync(history)
            for i in range(k):
                if self.sampling.greedy:
                    token = int(np.argmax(logits))
                    confidence = top_probability(logits) if self.p_min > 0 else 1.0
                else:
                    q = self.sampling.probs(logits)
                    token = sample(q, self.rng)
                    confidence = float(q.max())
                    draft.probs.append(q)
                if i >= self.min_draft and confidence < self.p_min:
                    if draft.probs:
                        draft.probs.pop()
                    break
                draft.tokens.append(token)
                draft.confidence.append(confidence)
                if i + 1 < k:
                    logits = self.ctx.decode([token], "last")
        self.seconds += time.perf_counter() - start
        self.tokens_drafted += len(draft.tokens)
        return draft

    def feedback(self, drafted: int, accepted: int) -> None:
        """The cache is re-synced from the history at the next proposal; nothing to do here."""
