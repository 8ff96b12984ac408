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

Gemma 4 drafts with a separate small model instead, the assistant (AssistantDrafter below), whose
blocks attend over the target's cache rather than a cache of their own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ..llama import Context, HeadSegment
from .model import choose
from .protocol import Draft, DraftPass, DraftRequest, Proposals


class MtpDrafter:
    """Drafts with the head context `head` on the target context `target` (made with hidden=True),
    whose sequence ids it shares."""

    name = "mtp"
    ahead = False

    def __init__(self, head: Context, target: Context, *, p_min: float = 0.0, min_draft: int = 0, chained: int = 0):
        self.ctx = head
        self.target = target
        self.p_min = p_min
        self.min_draft = min_draft
        self.heads = chained  # heads drafted one per depth (0: one head reused at every depth)
        self._zeros = np.zeros(head.model.n_embd_out, dtype=np.float32)
        self._rows: dict[int, dict[int, np.ndarray]] = {}  # seq -> position -> the target's hidden row there
        target.on_hidden = self._hidden

    @property
    def k_max(self) -> int | None:
        """The most tokens a step drafts (None: any): chained heads draft one each."""
        return self.heads or None

    def _hidden(self, seq: int, position: int, rows: np.ndarray) -> None:
        """The target decoded rows at position.. of seq: keep them for the head."""
        kept = self._rows.setdefault(seq, {})
        for i in range(len(rows)):
            kept[position + i] = rows[i]

    def _row(self, seq: int, position: int) -> np.ndarray:
        """The target's row at `position` (zeros before the first; also for a row no longer kept,
        which costs acceptance only: verification decides what is kept)."""
        return self._rows.get(seq, {}).get(position, self._zeros) if position >= 0 else self._zeros

    def _catch_up(self, seq: int, history: Sequence[int], upto: int, last: bool) -> HeadSegment | None:
        """The pairs the head lacks of history[:upto], after cutting its cache to what it shares."""
        keep = min(self.ctx.common_prefix(seq, history), upto - 1 if last else upto)
        self.ctx.trim(seq, keep)
        if keep >= upto:
            return None
        return HeadSegment(seq, list(history[keep:upto]), [self._row(seq, p - 1) for p in range(keep, upto)], last)

    def _prune(self, seq: int) -> None:
        """Rows the head has read are dropped, but the last one: the next pair needs it."""
        self._forget_rows_before(seq, len(self.ctx.tokens[seq]) - 1)

    def _forget_rows_before(self, seq: int, position: int) -> None:
        """The target's rows of `seq` before `position` are never read again."""
        kept = self._rows.get(seq)
        if kept:
            for old in [p for p in kept if p < position]:
                del kept[old]

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return max(0, len(history) - 1 - self.ctx.common_prefix(seq, history))

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        """Pairs for every prompt token the target has read (a prompt's hidden rows are all in)."""
        segments = [
            seg for seq, history in items if (seg := self._catch_up(seq, history, len(history), False)) is not None
        ]
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
        if not self.heads:
            return passes
        bases = {seg.seq: len(self.ctx.tokens[seg.seq]) for seg in segments}
        quiet = [HeadSegment(seg.seq, seg.tokens, seg.rows, False) for seg in segments]
        try:
            for head in range(self.heads - 1, 0, -1):
                self.ctx.select_head(head)
                passes.append(self._pass(quiet)[1])
                for seq, base in bases.items():
                    self.ctx.trim(seq, base)
        finally:
            self.ctx.select_head(0)
        return passes

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        out = Proposals()
        live = [r for r in requests if r.k > 0 and r.history]
        segments = [self._catch_up(r.seq, r.history, len(r.history), True) for r in live]
        committed = {r.seq: len(r.history) for r in live}
        drafted: dict[int, tuple[list[int], list[np.ndarray]]] = {r.seq: ([], []) for r in live}
        for request in live:
            out.drafts[request.seq] = Draft(q=None if request.sampling.greedy else [], confidence=[])
        depth = 0
        try:
            out.passes.extend(self._catch_up_heads(segments))
            while live:
                results, made = self._pass(segments)
                out.passes.append(made)
                depth += 1
                still = []
                for request, result in zip(live, results):
                    logits, hidden = result
                    token = choose(request, logits, out.drafts[request.seq], depth, self.p_min, self.min_draft)
                    if token is not None and depth < min(request.k, self.k_max or request.k):
                        still.append(request)
                        drafted[request.seq][0].append(token)
                        drafted[request.seq][1].append(hidden)
                live = still
                segments = [self._next_segment(r, drafted[r.seq]) for r in live]
                if self.heads and live:
                    self.ctx.select_head(depth)
        finally:
            if self.heads:
                self.ctx.select_head(0)
            for seq, n in committed.items():  # the drafted pairs carry the head's rows, not the target's
                self.ctx.trim(seq, n)
                self._prune(seq)
        return out

    def _next_segment(self, request: DraftRequest, drafted: tuple[list[int], list[np.ndarray]]) -> HeadSegment:
        """What the next depth's pass reads for `request`: the last drafted token with the head's
        row that drafted it; for chained heads, the whole draft region again from x_{n-1}."""
        tokens, rows = drafted
        if not self.heads:
            return HeadSegment(request.seq, [tokens[-1]], [rows[-1]])
        n = len(request.history)
        self.ctx.trim(request.seq, n - 1)
        return HeadSegment(request.seq, [request.history[-1], *tokens], [self._row(request.seq, n - 2), *rows], True)

    def _pass(self, segments: Sequence[HeadSegment]) -> tuple[list, DraftPass]:
        start = time.perf_counter()
        results = self.ctx.feed_head(segments)
        return results, DraftPass(sum(len(s.tokens) for s in segments), time.perf_counter() - start)

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        """The head's cache is brought in line with the history at the next proposal; nothing to do here."""

    def forget(self, seq: int) -> None:
        self.ctx.clear(seq)
        self._rows.pop(seq, None)


class AssistantDrafter(MtpDrafter):
    """Drafts with a Gemma 4 MTP assistant: a separate small model whose blocks attend over the
    target's own cache (its context is made on the target's, `Context(other=...)`), so it keeps no
    cache and reads nothing to catch up. Every depth of a step drafts at the one position after
    the target's cache (x_{n-1}'s): depth 1 from x_{n-1} with the target's hidden row h_{n-2},
    each later depth from the token drafted before with the assistant's own row, as llama.cpp
    drives it. It drafts any K; each token's q is the assistant's own distribution."""

    def _hidden(self, seq: int, position: int, rows: np.ndarray) -> None:
        """Only the row behind the last committed token is ever read, and it lies in the target's
        latest pass: rows before that pass go, however long auto leaves the assistant unused."""
        self._forget_rows_before(seq, position)
        super()._hidden(seq, position, rows)

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return 0

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        return Proposals()

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        out = Proposals()
        live = [r for r in requests if r.k > 0 and r.history]
        current = {r.seq: (r.history[-1], self._row(r.seq, len(r.history) - 2)) for r in live}
        for request in live:
            out.drafts[request.seq] = Draft(q=None if request.sampling.greedy else [], confidence=[])
        depth = 0
        while live:
            start = time.perf_counter()
            results = self.ctx.head_rows([(r.seq, len(r.history) - 1, *current[r.seq]) for r in live])
            out.passes.append(DraftPass(len(live), time.perf_counter() - start))
            depth += 1
            still = []
            for request, (logits, hidden) in zip(live, results):
                token = choose(request, logits, out.drafts[request.seq], depth, self.p_min, self.min_draft)
                if token is not None and depth < request.k:
                    still.append(request)
                    current[request.seq] = (token, hidden)
            live = still
        return out

    def forget(self, seq: int) -> None:
        self._rows.pop(seq, None)  # no cache of its own: the cells are the target's
