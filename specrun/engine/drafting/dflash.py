"""A DFlash head drafts a whole block in one pass: block diffusion over the target's own features.

The head's cache holds, at every position the target has read, keys and values its layers derive
from the target's layer inputs there (`Context.inject`); the target hands those inputs over after
every pass and they wait here until injected. Drafting k tokens for a history of n tokens runs one
pass over the block [x_{n-1}, mask × k] at positions n-1.. (its rows attend to each other, not
causally unless the file says so, and to the injected cache), whose rows 1..k give the k tokens;
the block's cells are dropped after the pass. Every asking sequence's block goes in that one pass.

The tokens are read from the rows in order, each as a draft model's would be (greedy, or sampled
with the row's distribution kept as q): the rows do not depend on the tokens chosen before, so q
is exactly what each token was drawn from and rejection sampling keeps the target's distribution.
A step drafts at most block - 1 tokens, the block the head was trained on.

A DFlash2 head adds a selector: the pass returns, for each block position, its top candidates and
scores for every pair of candidates at neighbouring positions, and the draft walks them, each
position's best successor of the token chosen before (`walk`). The walk is deterministic, so its
drafts are verified by the point-mass rule (q None), and each token's score share is its
confidence. Its blocks in one pass must be of one length: every sequence's block is as long as the
longest asked for, and each draft is cut to its own K.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ... import defaults
from ..llama import Context
from ..segments import HeadSegment
from .depth import choose
from .hidden import HiddenRows
from .protocol import Draft, DraftPass, DraftRequest, DraftTuning, Proposals, Sources, Traits


class DFlashDrafter(Traits):
    """Drafts with the DFlash head context `head`, made on the target context `target` (made with
    the head's feature layers), whose sequence ids it shares."""

    name = defaults.DFLASH
    title = "DFlash head"
    saved_with_target = False  # injected from the target's rows: read again after a restore
    runs_head = True
    reads_layer_inputs = True
    drafts_blocks = True

    def __init__(self, head: Context, target: Context, *, tuning: DraftTuning = DraftTuning()):
        self.ctx = head
        self.tuning = tuning
        spec = head.model.feature_head
        self.k_max = max(1, spec.block - 1)
        self.mask = spec.mask
        self.top_k = spec.selector_top_k  # DFlash2's selector (0: none)
        self.hidden = HiddenRows(target, target.feature_width)

    def configure(self, tuning: DraftTuning) -> None:
        self.tuning = tuning

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        """The head's cache is brought in line with the history at the next proposal; nothing to do here."""

    def finish(self, seq: int, history: Sequence[int]) -> None:
        """Nothing outlives a generation here."""

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return max(0, len(history) - 1 - self.ctx.common_prefix(seq, history))

    def _catch_up(self, seq: int, history: Sequence[int]) -> HeadSegment | None:
        """The positions the head lacks of history[:-1] (the target has read them), after cutting
        its cache to what it shares with the history."""
        upto = len(history) - 1
        keep = min(self.ctx.common_prefix(seq, history), upto)
        self.ctx.trim(seq, keep)
        if keep >= upto:
            return None
        return HeadSegment(seq, list(history[keep:upto]), [self.hidden.row(seq, p) for p in range(keep, upto)])

    def _inject(self, items: Sequence[tuple[int, Sequence[int]]]) -> list[DraftPass]:
        segments = [seg for seq, history in items if (seg := self._catch_up(seq, history)) is not None]
        if not segments:
            return []
        start = time.perf_counter()
        self.ctx.inject(segments)
        for seg in segments:
            self.hidden.forget_before(seg.seq, len(self.ctx.tokens[seg.seq]))
        return [DraftPass(sum(len(seg.tokens) for seg in segments), time.perf_counter() - start)]

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        """Inject every prompt position the target has read."""
        return Proposals(passes=self._inject([(seq, history) for seq, history in items if history]))

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        live = [r for r in requests if r.k > 0 and r.history]
        out = Proposals(passes=self._inject([(r.seq, r.history) for r in live]))
        if not live:
            return out
        sizes = [min(r.k, self.k_max) for r in live]
        if self.top_k:  # the selector's blocks are of one length
            sizes = [max(sizes)] * len(sizes)
        start = time.perf_counter()
        rows = self.ctx.block([(r.seq, [r.history[-1]] + [self.mask] * k) for r, k in zip(live, sizes)])
        out.passes.append(DraftPass(sum(k + 1 for k in sizes), time.perf_counter() - start))
        for request, k, block in zip(live, sizes, rows):
            if self.top_k:
                out.drafts[request.seq] = walk(block, self.top_k, min(request.k, k), self.tuning, request)
                continue
            draft = Draft(q=None if request.sampling.greedy else [], confidence=[])
            for depth in range(1, k + 1):
                if choose(request, block[depth], draft, depth, self.tuning) is None:
                    break
            out.drafts[request.seq] = draft
        return out

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        """The head's cache is brought in line with the history at the next proposal; nothing to do here."""

    def forget(self, seq: int) -> None:
        self.ctx.clear(seq)
        self.hidden.forget(seq)


def walk(rows: np.ndarray, top_k: int, k: int, tuning: DraftTuning, request: DraftRequest) -> Draft:
    """Up to k tokens from a DFlash2 selector's rows (row 0: the block's first token): at each
    position, the candidate scoring best after the one chosen before (any, at position 1, whose
    scores follow the block's first token), with its softmax share as confidence; stops below
    `draft_p_min` after `draft_min` tokens, or where a constrained sequence's guide refuses it."""
    draft = Draft(confidence=[])
    guide = request.guide
    before = 0
    for depth in range(1, min(k, len(rows) - 1) + 1):
        row = rows[depth]
        scores = row[top_k + before * top_k : top_k + (before + 1) * top_k]
        best = int(np.argmax(scores))
        confidence = float(1.0 / np.exp(scores - scores[best]).sum())
        token = int(row[best])
        if depth > tuning.draft_min and confidence < tuning.draft_p_min:
            break
        if guide is not None and not guide.allows(token):
            break
        draft.tokens.append(token)
        draft.confidence.append(confidence)
        if guide is not None:
            guide.consume([token])
        before = best
    return draft


def build(sources: Sources) -> DFlashDrafter | None:
    """A DFlash head given as the draft, on the head context made for it."""
    if sources.head is None or sources.feature_head != defaults.DFLASH:
        return None
    return DFlashDrafter(sources.head, sources.target)
