"""The draft model drafting for several sequences at once, in one draft-model batch per depth.

ModelDrafter drafts for one history with one decode per token; a server drafting for m requests
that way pays m decodes per token. Here every sequence's catch-up (the tokens its draft cache
missed) goes into one batch, then each further depth feeds one token per sequence still drafting,
so drafting k tokens for m requests costs k draft passes of at most m rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..batch import Segment, SharedContext
from ..sampling import SamplingParams, sample
from .model import VocabBridge, top_probability
from .protocol import Draft


@dataclass
class DraftJob:
    """What one sequence asks of the draft model this step."""

    seq: int
    history: Sequence[int]
    k: int
    sampling: SamplingParams
    rng: np.random.Generator


@dataclass
class DraftPass:
    """One draft-model pass: how many tokens it fed and how long it took (for the cost curve)."""

    tokens: int
    seconds: float


@dataclass
class BatchDraft:
    """Every sequence's draft, and the passes that made them."""

    drafts: dict[int, Draft] = field(default_factory=dict)
    passes: list[DraftPass] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.passes)


class BatchedModelDrafter:
    """Drafts with a small model for many sequences of a SharedContext (sequence ids shared with
    the target's), stopping a sequence's draft early when the draft's top probability falls below
    `p_min` after `min_draft` tokens. A `bridge` reconciles vocabularies of different sizes."""

    name = "draft"

    def __init__(self, ctx: SharedContext, *, p_min: float = 0.0, min_draft: int = 0, bridge: VocabBridge | None = None):
        self.ctx = ctx
        self.p_min = p_min
        self.min_draft = min_draft
        self.bridge = bridge if bridge is not None and not bridge.identity else None

    def _feedable(self, tokens: Sequence[int]) -> list[int]:
        return list(tokens) if self.bridge is None else self.bridge.feedable(tokens)

    def lag(self, seq: int, history: Sequence[int]) -> int:
        """Tokens the draft must read before it can draft for `history` (at least the last one)."""
        fed = self._feedable(history)
        return len(fed) - min(self.ctx.common_prefix(seq, fed), len(fed) - 1)

    def catch_up(self, items: Sequence[tuple[int, Sequence[int]]]) -> DraftPass | None:
        """Read (sequence, tokens) prompts into the draft cache without drafting, reusing what it holds."""
        segments = []
        for seq, history in items:
            fed = self._feedable(history)
            keep = self.ctx.common_prefix(seq, fed)
            self.ctx.trim(seq, keep)
            if keep < len(fed):
                segments.append(Segment(seq, fed[keep:], "none"))
        return self._pass(segments)[1] if segments else None

    def propose(self, jobs: Sequence[DraftJob]) -> BatchDraft:
        """Up to `k` tokens for each job, drafted together depth by depth."""
        result = BatchDraft()
        live = [job for job in jobs if job.k > 0]
        segments = []
        for job in live:
            fed = self._feedable(job.history)
            keep = min(self.ctx.common_prefix(job.seq, fed), len(fed) - 1)  # the last one is decoded again for its logits
            self.ctx.trim(job.seq, keep)
            segments.append(Segment(job.seq, fed[keep:], "last"))
            result.drafts[job.seq] = Draft(probs=None if job.sampling.greedy else [], confidence=[])
        depth = 0
        while live:
            logits, drafted = self._pass(segments)
            result.passes.append(drafted)
            depth += 1
            still, segments = [], []
            for job, row in zip(live, logits):
                token = self._choose(job, row, result.drafts[job.seq], depth)
                if token is not None and depth < job.k:
                    still.append(job)
                    segments.append(Segment(job.seq, [token], "last"))
            live = still
        return result

    def _choose(self, job: DraftJob, logits: np.ndarray, draft: Draft, depth: int) -> int | None:
        """Pick the token at `depth` for one job and append it to its draft; None when the draft stops here."""
        if self.bridge is not None:
            logits = self.bridge.proposal_logits(logits)
        if job.sampling.greedy:
            token = int(np.argmax(logits))
            confidence = top_probability(logits) if self.p_min > 0 else 1.0
            q = None
        else:
            q = job.sampling.probs(logits)
            token = sample(q, job.rng)
            confidence = float(q.max())
        if depth > self.min_draft and confidence < self.p_min:
            return None
        draft.tokens.append(token)
        draft.confidence.append(confidence)
        if q is not None:
            draft.probs.append(q if self.bridge is None else self.bridge.to_target(q))
        return token

    def _pass(self, segments: Sequence[Segment]) -> tuple[list[np.ndarray | None], DraftPass]:
        start = time.perf_counter()
        logits = self.ctx.decode(segments)
        return logits, DraftPass(sum(len(s.tokens) for s in segments), time.perf_counter() - start)
