"""Prompt lookup as a drafter of the engine: one PromptLookup per sequence, each indexing its own
history. Its proposals cost microseconds and carry their own confidence, so they are made ahead of
every step and judged as they stand."""

from __future__ import annotations

from collections.abc import Sequence

from ... import defaults
from .prompt_lookup import PromptLookup
from .protocol import DraftRequest, DraftTuning, Proposals, Sources


class LookupDrafter:
    """Prompt lookup for every sequence. A generation may bring a lookup that outlives it (`begin`
    with a PromptLookup: what it learned of its evidence carries over to the next turn); otherwise
    each starts afresh with the tuning's match lengths and K."""

    name = defaults.LOOKUP
    ahead = True
    ctx = None
    k_max = None

    def __init__(self, tuning: DraftTuning = DraftTuning()):
        self.tuning = tuning
        self.states: dict[int, PromptLookup] = {}

    def configure(self, tuning: DraftTuning) -> None:
        """Lookups made for other match lengths or another K are dropped."""
        if (tuning.ngrams, tuning.k_max) != (self.tuning.ngrams, self.tuning.k_max):
            self.states.clear()
        self.tuning = tuning

    def begin(self, seq: int, carried: object | None) -> None:
        if isinstance(carried, PromptLookup):
            self.states[seq] = carried
        else:
            self.states.pop(seq, None)

    def state(self, seq: int) -> PromptLookup:
        if seq not in self.states:
            self.states[seq] = PromptLookup(*self.tuning.ngrams, k_max=self.tuning.k_max)
        return self.states[seq]

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        out = Proposals()
        for request in requests:
            out.drafts[request.seq] = self.state(request.seq).propose(request.history, request.k)
        return out

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return 0

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        """The history is indexed as proposals are asked for: nothing to read ahead."""
        return Proposals()

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        if seq in self.states:
            self.states[seq].feedback(drafted, accepted)

    def forget(self, seq: int) -> None:
        self.states.pop(seq, None)


def build(sources: Sources) -> LookupDrafter:
    """Prompt lookup needs nothing but the history: every session has it."""
    return LookupDrafter()
