"""An EAGLE-3 head drafts: one decoder layer fed the target's own features, the inputs of three of
its layers fused by the head's encoder.

The head's cache holds at position P the pair (x_{P+1}, g_P): the token after P with the fused
features g_P of the target's row at P. Renumbered from 1, the pair for token p is (x_p, g_{p-1}),
which is the MTP heads' pair (x_p, h_{p-1}) one position earlier, so the head is driven as they
are (mtp.py) on the history without its first token: drafting from a history of n tokens feeds
(x_{n-1}, g_{n-2}), then each drafted token with the head's own pre-norm row of the depth before,
one pass per depth for every asking sequence, and cuts the head's cache back to the committed
pairs afterwards. The target hands over its layer inputs after every pass; the encoder fuses
those the head has not read, for every catching-up sequence in one pass, when it reads them.

Each token's q is the head's own distribution under the sampling settings (its logits come back
in the target's vocabulary, a head with a reduced vocabulary scattering them there), so rejection
sampling keeps the target's distribution exactly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ... import defaults
from ..llama import Context
from ..segments import HeadSegment
from .hidden import HiddenRows
from .mtp import MtpDrafter
from .protocol import DraftPass, DraftRequest, DraftTuning, Proposals, Sources


class Eagle3Drafter(MtpDrafter):
    """Drafts with the EAGLE-3 head context `head`, made on the target context `target` (made with
    the head's feature layers), whose sequence ids it shares."""

    name = defaults.EAGLE3
    title = "EAGLE-3 head"
    saved_with_target = False  # its cache is a position behind the target's: read again after a restore
    reads_layer_inputs = True

    def __init__(self, head: Context, target: Context, *, tuning: DraftTuning = DraftTuning()):
        self.ctx = head
        self.tuning = tuning
        self.k_max = None
        self.hidden = HiddenRows(target, target.feature_width)
        self._encoded = DraftPass(0, 0.0)  # the last catch-up's encoder pass

    @staticmethod
    def _view(history: Sequence[int]) -> Sequence[int]:
        """What the head's cache mirrors of a history: every token but the first."""
        return history[1:]

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return super().lag(seq, self._view(history))

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        out = super().read([(seq, self._view(history)) for seq, history in items if len(history) > 1])
        return self._with_encoder(out)

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        shifted = [replace(r, history=self._view(r.history)) for r in requests if len(r.history) > 1]
        return self._with_encoder(super().propose(shifted))

    def _with_encoder(self, out: Proposals) -> Proposals:
        """The encoder's pass counts as part of the first pass after it (it is a small share, and
        its rows are the same sequences' catch-up rows)."""
        if self._encoded.seconds and out.passes:
            first = out.passes[0]
            out.passes[0] = DraftPass(first.rows, first.seconds + self._encoded.seconds)
        self._encoded = DraftPass(0, 0.0)
        return out

    def _segments(self, items) -> dict[int, HeadSegment | None]:
        """Each sequence's pairs the head lacks, their features fused in one encoder pass: the pair
        of (shifted) entry p takes g_p, the target's row at position p."""
        wanted: dict[int, tuple[Sequence[int], int, int, bool]] = {}
        for seq, history, upto, last in items:
            keep = min(self.ctx.common_prefix(seq, history), upto - 1 if last else upto)
            self.ctx.trim(seq, keep)
            if keep < upto:
                wanted[seq] = (history, keep, upto, last)
        out: dict[int, HeadSegment | None] = {seq: None for seq, *_ in items}
        if not wanted:
            return out
        features = [self.hidden.row(seq, p) for seq, (_, keep, upto, _) in wanted.items() for p in range(keep, upto)]
        start = time.perf_counter()
        fused = self.ctx.encode(np.stack(features))
        self._encoded = DraftPass(len(features), time.perf_counter() - start)
        at = 0
        for seq, (history, keep, upto, last) in wanted.items():
            n = upto - keep
            out[seq] = HeadSegment(seq, list(history[keep:upto]), list(fused[at : at + n]), last)
            at += n
        return out

    def _prune(self, seq: int) -> None:
        """Rows the head has read are dropped; the next pair takes the row at its own position."""
        self.hidden.forget_before(seq, len(self.ctx.tokens[seq]))


def build(sources: Sources) -> Eagle3Drafter | None:
    """An EAGLE-3 head given as the draft, on the head context made for it."""
    if sources.head is None or sources.feature_head != defaults.EAGLE3:
        return None
    return Eagle3Drafter(sources.head, sources.target)
