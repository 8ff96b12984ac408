"""Prompt lookup as a drafter of the engine: one PromptLookup per sequence, each indexing its own
history. Its proposals cost microseconds and carry their own confidence, so they are made ahead of
every step and judged as they stand."""

from __future__ import annotations

from collections.abc import Sequence

from .prompt_lookup import PromptLookup
from .protocol import DraftRequest, Proposals


class LookupDrafter:
    """Prompt lookup for every sequence; `attach` gives a sequence a lookup that outlives one
    generation (what it learned of its evidence carries over to the next turn)."""

    name = "ngram"
    ahead = True

    def __init__(self, ngram_min: int, ngram_max: int, k_max: int):
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.k_max = k_max
        self.states: dict[int, PromptLookup] = {}

    def attach(self, seq: int, lookup: PromptLookup) -> None:
        self.states[seq] = lookup

    def state(self, seq: int) -> PromptLookup:
        if seq not in self.states:
            self.states[seq] = PromptLookup(self.ngram_min, self.ngram_max, k_max=self.k_max)
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
