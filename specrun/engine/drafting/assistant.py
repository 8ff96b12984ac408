"""A Gemma 4 MTP assistant drafts: a separate small model whose blocks attend over the target's own
cache (its context is made on the target's, `Context(other=...)`), so it keeps no cache and reads
nothing to catch up.

Every depth of a step drafts at the one position after the target's cache (x_{n-1}'s): depth 1
from x_{n-1} with the target's hidden row h_{n-2}, each later depth from the token drafted before
with the assistant's own row, as llama.cpp drives it. It drafts any K; each token's q is the
assistant's own distribution, so rejection sampling keeps the target's distribution exactly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ... import defaults
from ..llama import Context
from .depth import draft_by_depth
from .hidden import HiddenRows
from .protocol import DraftPass, DraftRequest, DraftTuning, Proposals, Sources, Traits


class AssistantDrafter(Traits):
    """Drafts with the assistant's context `ctx`, made on the target context `target` (made with
    hidden=True), whose sequence ids it shares. It takes the MTP heads' place: a Gemma 4 target
    has none of its own."""

    name = defaults.MTP
    title = "Gemma 4 MTP assistant"
    runs_head = True

    def __init__(self, ctx: Context, target: Context, *, tuning: DraftTuning = DraftTuning()):
        self.ctx = ctx
        self.tuning = tuning
        self.hidden = HiddenRows(target, ctx.model.n_embd_out, latest_only=True)

    def configure(self, tuning: DraftTuning) -> None:
        self.tuning = tuning

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        """It keeps nothing between steps but the target's latest rows; nothing to do here."""

    def finish(self, seq: int, history: Sequence[int]) -> None:
        """Nothing outlives a generation here."""

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return 0

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        return Proposals()

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        live = [r for r in requests if r.k > 0 and r.history]
        current = {r.seq: (r.history[-1], self.hidden.row(r.seq, len(r.history) - 2)) for r in live}

        def run(asked: Sequence[DraftRequest], depth: int):
            start = time.perf_counter()
            rows = self.ctx.head_rows([(r.seq, len(r.history) - 1, *current[r.seq]) for r in asked])
            return rows, DraftPass(len(asked), time.perf_counter() - start)

        def advance(request: DraftRequest, token: int, hidden) -> None:
            current[request.seq] = (token, hidden)

        return draft_by_depth(live, run, advance, self.tuning)

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        """Nothing of its own follows the history; nothing to do here."""

    def forget(self, seq: int) -> None:
        self.ctx.clear(seq)
        self.hidden.forget(seq)


def build(sources: Sources) -> AssistantDrafter | None:
    """The Gemma 4 assistant given as the draft, on the head context made for it."""
    if sources.head is None or not sources.assistant:
        return None
    return AssistantDrafter(sources.head, sources.target)
