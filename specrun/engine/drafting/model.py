"""The draft model: a small model with the target's vocabulary drafts token by token, for every
sequence that asks at once.

Every asking sequence's catch-up (the tokens its draft cache missed) goes into one batch, then each
further depth feeds one token per sequence still drafting, so drafting k tokens for m sequences
costs k draft passes of at most m rows, and one sequence alone pays what a loop of its own would.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ... import defaults
from ..llama import Context
from ..segments import Segment
from .depth import draft_by_depth
from .protocol import DraftPass, DraftRequest, DraftTuning, Proposals, Sources, Traits
from .vocab_bridge import VocabBridge


class ModelDrafter(Traits):
    """Drafts with a small model on its own context, whose sequence ids are the target's.

    A sequence's draft stops early when the draft's top probability falls below `draft_p_min`
    (after `draft_min` tokens): an unsure draft is likely rejected and costs a draft pass per token.
    With a `bridge`, vocabularies of different sizes are reconciled (see VocabBridge).
    """

    name = defaults.MODEL
    title = "draft model"
    saved_with_target = True
    runs_model = True

    def __init__(self, ctx: Context, *, tuning: DraftTuning = DraftTuning(), bridge: VocabBridge | None = None):
        self.ctx = ctx
        self.tuning = tuning
        self.bridge = bridge if bridge is not None and not bridge.identity else None
        self.holds_target_tokens = self.bridge is None  # a bridged vocabulary feeds other ids

    def configure(self, tuning: DraftTuning) -> None:
        self.tuning = tuning

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        """The cache is brought in line with the history at the next proposal; nothing to do here."""

    def finish(self, seq: int, history: Sequence[int]) -> None:
        """Nothing outlives a generation here."""

    def _feedable(self, tokens: Sequence[int]) -> list[int]:
        return list(tokens) if self.bridge is None else self.bridge.feedable(tokens)

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return len(history) - self.ctx.common_prefix(seq, self._feedable(history))

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        segments = []
        for seq, history in items:
            fed = self._feedable(history)
            keep = self.ctx.common_prefix(seq, fed)
            self.ctx.trim(seq, keep)
            if keep < len(fed):
                segments.append(Segment(seq, fed[keep:], "none"))
        out = Proposals()
        if segments:
            out.passes.append(self._pass(segments)[1])
        return out

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        live = [r for r in requests if r.k > 0]
        segments: dict[int, Segment] = {}
        for request in live:
            fed = self._feedable(request.history)
            keep = min(
                self.ctx.common_prefix(request.seq, fed), len(fed) - 1
            )  # the last one is decoded again for its logits
            self.ctx.trim(request.seq, keep)
            segments[request.seq] = Segment(request.seq, fed[keep:], "last")
            self.ctx.shortlist(request.seq, self._shortlist(request))

        def run(asked: Sequence[DraftRequest], depth: int):
            logits, made = self._pass([segments[r.seq] for r in asked])
            if depth == 0:  # a recurrent draft cache cannot take its draft back: keep the history to return to
                for request in asked:
                    self.ctx.checkpoint(request.seq)
            return [(self._proposal_logits(row), None) for row in logits], made

        def advance(request: DraftRequest, token: int, _) -> None:
            segments[request.seq] = Segment(request.seq, [token], "last")

        return draft_by_depth(live, run, advance, self.tuning)

    def _shortlist(self, request: DraftRequest) -> int:
        """The top-k cut the draft's rows may take in the graph: none where the whole row is
        needed, for the confidence of a greedy draft under draft_p_min (a softmax over the
        vocabulary) or for the bridge's cut to the target's ids (which comes before top-k)."""
        if self.bridge is not None or (request.sampling.greedy and self.tuning.draft_p_min > 0):
            return 0
        return request.sampling.shortlist

    def _proposal_logits(self, logits: np.ndarray) -> np.ndarray:
        """A row as drafts are chosen from it: cut to the target's ids through the bridge."""
        return logits if self.bridge is None else self.bridge.proposal_logits(logits)

    def _pass(self, segments: Sequence[Segment]) -> tuple[list[np.ndarray | None], DraftPass]:
        """One draft pass; its rows are read before the next one, so they need no copy when they fit one batch."""
        start = time.perf_counter()
        logits = self.ctx.decode(segments, copy=sum(len(s.tokens) for s in segments) > self.ctx.n_batch)
        return logits, DraftPass(sum(len(s.tokens) for s in segments), time.perf_counter() - start)

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        """The cache is brought in line with the history at the next proposal; nothing to do here."""

    def forget(self, seq: int) -> None:
        self.ctx.clear(seq)


def build(sources: Sources) -> ModelDrafter | None:
    """The draft model's drafter, for a draft that shares the target's vocabulary."""
    if sources.draft is None or sources.text:
        return None
    return ModelDrafter(sources.draft, bridge=sources.bridge)
