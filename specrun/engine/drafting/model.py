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

from ..llama import Context, Model, Segment
from ..shortlist import argmax
from .protocol import Draft, DraftPass, DraftRequest, Proposals


def top_probability(logits: np.ndarray) -> float:
    """Softmax probability of the argmax, without materialising the distribution."""
    shifted = logits - logits.max()
    return float(1.0 / np.exp(shifted).sum())


def choose(
    request: DraftRequest, logits: np.ndarray, draft: Draft, depth: int, p_min: float, min_draft: int
) -> int | None:
    """The token at `depth` of one sequence's draft, appended to it with its confidence (and its
    distribution q when sampling, so verification stays exact); None when the draft stops here:
    its confidence fell below `p_min` after `min_draft` tokens."""
    q = None
    if request.sampling.greedy:
        token = argmax(logits)
        confidence = top_probability(logits) if p_min > 0 else 1.0
    else:
        q = request.sampling.dist(logits)
        token = q.sample(request.rng)
        confidence = q.top()
    if depth > min_draft and confidence < p_min:
        return None
    draft.tokens.append(token)
    draft.confidence.append(confidence)
    if q is not None:
        draft.q.append(q)
    return token


class VocabBridge:
    """Token ids between a target and a draft whose vocabularies differ in size.

    Compatible models share every id below the smaller size (llama.cpp allows up to 128 ids of
    difference, usually padding). The draft must never propose an id the target lacks, so its
    logits are cut to the target's size before anything is chosen from them (its proposal
    distribution then lies on ids the target has). The draft model must never be fed an id it
    lacks, so such ids in the history are replaced, one for one, by the draft's first token for
    the same text: the draft then reads nearly the same context, and since verification decides
    alone what is kept, the output stays exactly the target's.
    """

    def __init__(self, target: Model, draft: Model):
        self.target_size = target.n_vocab
        self.draft_size = draft.n_vocab
        self._target = target
        self._draft = draft
        self._substitutes: dict[int, int] = {}

    @property
    def identity(self) -> bool:
        return self.target_size == self.draft_size

    def proposal_logits(self, logits: np.ndarray) -> np.ndarray:
        """The draft's logits restricted to ids the target has."""
        return logits[: self.target_size] if self.draft_size > self.target_size else logits

    def feedable(self, tokens: Sequence[int]) -> list[int]:
        """`tokens` with every id the draft lacks replaced (a copy; unchanged when none is)."""
        if self.target_size <= self.draft_size:
            return list(tokens)
        size = self.draft_size
        return [t if t < size else self._substitute(t) for t in tokens]

    def _substitute(self, token: int) -> int:
        if token not in self._substitutes:
            text = self._target.piece(token)
            ids = (
                self._draft.tokenize(text.decode("utf-8", "replace"), add_special=False, parse_special=False)
                if text
                else []
            )
            self._substitutes[token] = next((i for i in ids if i < self.draft_size), 0)
        return self._substitutes[token]


class ModelDrafter:
    """Drafts with a small model on its own context, whose sequence ids are the target's.

    A sequence's draft stops early when the draft's top probability falls below `p_min` (after
    `min_draft` tokens): an unsure draft is likely rejected and costs a draft pass per token. With a
    `bridge`, vocabularies of different sizes are reconciled (see VocabBridge).
    """

    name = "draft"
    ahead = False

    def __init__(self, ctx: Context, *, p_min: float = 0.0, min_draft: int = 0, bridge: VocabBridge | None = None):
        self.ctx = ctx
        self.p_min = p_min
        self.min_draft = min_draft
        self.bridge = bridge if bridge is not None and not bridge.identity else None

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
        out = Proposals()
        live = [r for r in requests if r.k > 0]
        segments = []
        for request in live:
            fed = self._feedable(request.history)
            keep = min(
                self.ctx.common_prefix(request.seq, fed), len(fed) - 1
            )  # the last one is decoded again for its logits
            self.ctx.trim(request.seq, keep)
            segments.append(Segment(request.seq, fed[keep:], "last"))
            self.ctx.shortlist(request.seq, self._shortlist(request))
            out.drafts[request.seq] = Draft(q=None if request.sampling.greedy else [], confidence=[])
        depth = 0
        while live:
            logits, drafted = self._pass(segments)
            out.passes.append(drafted)
            depth += 1
            if depth == 1:  # a recurrent draft cache cannot take its draft back: keep the history to return to
                for request in live:
                    self.ctx.checkpoint(request.seq)
            still, segments = [], []
            for request, row in zip(live, logits):
                token = self._choose(request, row, out.drafts[request.seq], depth)
                if token is not None and depth < request.k:
                    still.append(request)
                    segments.append(Segment(request.seq, [token], "last"))
            live = still
        return out

    def _shortlist(self, request: DraftRequest) -> int:
        """The top-k cut the draft's rows may take in the graph: none where the whole row is
        needed, for the confidence of a greedy draft under p_min (a softmax over the vocabulary)
        or for the bridge's cut to the target's ids (which comes before top-k)."""
        if self.bridge is not None or (request.sampling.greedy and self.p_min > 0):
            return 0
        return request.sampling.shortlist

    def _choose(self, request: DraftRequest, logits: np.ndarray, draft: Draft, depth: int) -> int | None:
        """Pick the token at `depth` for one sequence and append it to its draft; None when the draft stops here."""
        if self.bridge is not None:
            logits = self.bridge.proposal_logits(logits)
        return choose(request, logits, draft, depth, self.p_min, self.min_draft)

    def _pass(self, segments: Sequence[Segment]) -> tuple[list[np.ndarray | None], DraftPass]:
        """One draft pass; its rows are read before the next one, so they need no copy when they fit one batch."""
        start = time.perf_counter()
        logits = self.ctx.decode(segments, copy=sum(len(s.tokens) for s in segments) > self.ctx.n_batch)
        return logits, DraftPass(sum(len(s.tokens) for s in segments), time.perf_counter() - start)

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        """The cache is brought in line with the history at the next proposal; nothing to do here."""

    def forget(self, seq: int) -> None:
        self.ctx.clear(seq)
