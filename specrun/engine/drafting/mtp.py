"""The target's own multi-token-prediction ("nextn") head drafts: no second model, only one more
layer that reads the target's last hidden state.

The head's context is fed pairs: at position p, the token x_p with the target's hidden row
h_{p-1} (zeros at p = 0). The target context hands its rows over after every pass (`on_hidden`);
they wait here until the head reads them. Drafting k tokens for a sequence of n tokens feeds
(x_{n-1}, h_{n-2}) behind the pairs the head missed, then each drafted token with the head's own
hidden row of the step before, one head pass per depth for every asking sequence together. The
head's cache is then cut back to the committed history: its own rows are not the target's, so
what it drafted is never a pair it keeps.

A model with one head (Qwen3.5/3.6, GLM-4.5) reuses it for every depth. A model with several heads
trained one per depth (Step-3.5) is chained, as llama.cpp chains it: head d drafts the token at
depth d, so a step drafts at most as many tokens as there are heads. The heads share the cache's
cells but each keeps its own layer of it: every head reads each committed pair, and at depth d
the draft region is cut and re-read under head d ([x_{n-1}] and the tokens drafted so far, with
the hidden rows that produced them), so head d attends only to what it wrote. Each token's q is
the head's own distribution under the sampling settings, so rejection sampling keeps the target's
distribution exactly at any temperature.

Gemma 4 drafts with a separate small model instead, the assistant (assistant.py), whose blocks
attend over the target's cache rather than a cache of their own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ... import defaults
from ..llama import Context
from ..segments import HeadSegment
from .depth import draft_by_depth
from .hidden import HiddenRows
from .protocol import DraftPass, DraftRequest, DraftTuning, Proposals, Sources, Traits


class MtpDrafter(Traits):
    """Drafts with the head context `head` on the target context `target` (made with hidden=True),
    whose sequence ids it shares. `chained`: how many heads are trained one per depth (0: one head
    reused at every depth); chained heads draft one token each, so that is its `k_max`."""

    name = defaults.MTP
    title = "MTP heads"
    saved_with_target = True
    runs_head = True

    def __init__(self, head: Context, target: Context, *, tuning: DraftTuning = DraftTuning(), chained: int = 0):
        self.ctx = head
        self.tuning = tuning
        self.k_max = chained or None
        self.hidden = HiddenRows(target, head.model.n_embd_out)

    def configure(self, tuning: DraftTuning) -> None:
        self.tuning = tuning

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        """The head's cache is brought in line with the history at the next proposal; nothing to do here."""

    def finish(self, seq: int, history: Sequence[int]) -> None:
        """Nothing outlives a generation here."""

    def _catch_up(self, seq: int, history: Sequence[int], upto: int, last: bool) -> HeadSegment | None:
        """The pairs the head lacks of history[:upto], after cutting its cache to what it shares."""
        keep = min(self.ctx.common_prefix(seq, history), upto - 1 if last else upto)
        self.ctx.trim(seq, keep)
        if keep >= upto:
            return None
        rows = [self.hidden.row(seq, p - 1) for p in range(keep, upto)]
        return HeadSegment(seq, list(history[keep:upto]), rows, last)

    def _segments(self, items) -> dict[int, HeadSegment | None]:
        """`_catch_up` for each (sequence, history, upto, last)."""
        return {seq: self._catch_up(seq, history, upto, last) for seq, history, upto, last in items}

    def _prune(self, seq: int) -> None:
        """Rows the head has read are dropped, but the last one: the next pair needs it."""
        self.hidden.forget_before(seq, len(self.ctx.tokens[seq]) - 1)

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return max(0, len(history) - 1 - self.ctx.common_prefix(seq, history))

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        """Pairs for every prompt token the target has read (a prompt's hidden rows are all in)."""
        caught = self._segments([(seq, history, len(history), False) for seq, history in items])
        segments = [seg for seg in caught.values() if seg is not None]
        out = Proposals()
        if segments:
            out.passes.extend(self._catch_up_heads(segments))
            out.passes.append(self._pass(segments)[1])
            for seg in segments:
                self._prune(seg.seq)
        return out

    def _catch_up_heads(self, segments: Sequence[HeadSegment]) -> list[DraftPass]:
        """Chained heads: the heads after the first read the same pairs, each into its own layer
        (the cells are cut and taken again, so the first head, read last, leaves them in place)."""
        passes = []
        if not self.k_max:
            return passes
        bases = {seg.seq: len(self.ctx.tokens[seg.seq]) for seg in segments}
        quiet = [HeadSegment(seg.seq, seg.tokens, seg.rows, False) for seg in segments]
        try:
            for head in range(self.k_max - 1, 0, -1):
                self.ctx.select_head(head)
                passes.append(self._pass(quiet)[1])
                for seq, base in bases.items():
                    self.ctx.trim(seq, base)
        finally:
            self.ctx.select_head(0)
        return passes

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        live = [r for r in requests if r.k > 0 and r.history]
        segments = self._segments([(r.seq, r.history, len(r.history), True) for r in live])
        drafted: dict[int, tuple[list[int], list]] = {r.seq: ([], []) for r in live}

        def run(asked: Sequence[DraftRequest], depth: int):
            if depth:
                for request in asked:
                    segments[request.seq] = self._next_segment(request, drafted[request.seq])
                if self.k_max:
                    self.ctx.select_head(depth)
            return self._pass([segments[r.seq] for r in asked])

        def advance(request: DraftRequest, token: int, hidden) -> None:
            drafted[request.seq][0].append(token)
            drafted[request.seq][1].append(hidden)

        try:
            caught_up = self._catch_up_heads([segments[r.seq] for r in live])
            out = draft_by_depth(live, run, advance, self.tuning, self.k_max)
            out.passes[:0] = caught_up
            return out
        finally:
            if self.k_max:
                self.ctx.select_head(0)
            for request in live:  # the drafted pairs carry the head's rows, not the target's
                self.ctx.trim(request.seq, len(request.history))
                self._prune(request.seq)

    def _next_segment(self, request: DraftRequest, drafted: tuple[list[int], list]) -> HeadSegment:
        """What the next depth's pass reads for `request`: the last drafted token with the head's
        row that drafted it; for chained heads, the whole draft region again from x_{n-1}."""
        tokens, rows = drafted
        if not self.k_max:
            return HeadSegment(request.seq, [tokens[-1]], [rows[-1]])
        n = len(request.history)
        self.ctx.trim(request.seq, n - 1)
        return HeadSegment(
            request.seq, [request.history[-1], *tokens], [self.hidden.row(request.seq, n - 2), *rows], True
        )

    def _pass(self, segments: Sequence[HeadSegment]) -> tuple[list, DraftPass]:
        start = time.perf_counter()
        results = self.ctx.feed_head(segments)
        return results, DraftPass(sum(len(s.tokens) for s in segments), time.perf_counter() - start)

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        """The head's cache is brought in line with the history at the next proposal; nothing to do here."""

    def forget(self, seq: int) -> None:
        self.ctx.clear(seq)
        self.hidden.forget(seq)


def build(sources: Sources) -> MtpDrafter | None:
    """The target's own MTP heads, where the session made a head context for them."""
    if sources.head is None or sources.assistant or sources.feature_head is not None:
        return None
    return MtpDrafter(sources.head, sources.target, chained=sources.chained_heads)
