"""Prompt lookup as a drafter of the engine: one PromptLookup per sequence, each indexing its own
history, and a pool of earlier requests' texts it may draft from too. Its proposals cost
microseconds and carry their own confidence, so they are made ahead of every step and judged as
they stand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ... import defaults
from .ahead import AheadDrafter
from .lookup_pool import LookupPool
from .prompt_lookup import PromptLookup
from .protocol import DraftRequest, DraftTuning, Proposals, Sources


@dataclass(frozen=True)
class LookupStart:
    """What a generation hands prompt lookup: a lookup that outlives it (a session's: what it learned
    of its evidence carries over to the next turn), and the key of the pool of earlier texts it may
    draft from and adds its own to (None: no pool)."""

    carried: PromptLookup | None = None
    pool_key: str | None = None


class LookupDrafter(AheadDrafter):
    """Prompt lookup for every sequence, each starting afresh with the tuning's match lengths and K
    unless its generation brings a lookup (`LookupStart`)."""

    name = defaults.LOOKUP
    title = "prompt lookup"
    takes = LookupStart

    def __init__(self, tuning: DraftTuning = DraftTuning(), *, pool: LookupPool | None = None):
        super().__init__()
        self.tuning = tuning
        if pool is None:
            pool = LookupPool(defaults.LOOKUP_POOL_TOKENS, defaults.LOOKUP_POOL_KEY_TOKENS)
        self.pool = pool
        self._pool_keys: dict[int, tuple[str, int]] = {}  # seq -> (its pool's key, its prompt's length)

    def configure(self, tuning: DraftTuning) -> None:
        """Lookups made for other match lengths or another K are dropped."""
        if (tuning.ngrams, tuning.k_max) != (self.tuning.ngrams, self.tuning.k_max):
            self.states.clear()
        self.tuning = tuning

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        start = given if isinstance(given, LookupStart) else LookupStart()
        self._pool_keys.pop(seq, None)
        if start.carried is not None:
            self.states[seq] = start.carried
        else:
            self.states.pop(seq, None)
        if start.pool_key is not None:
            self._pool_keys[seq] = (start.pool_key, len(prompt))
            pool = self.pool.get(start.pool_key)
            if pool is not None:
                self.state(seq).pool = pool

    def finish(self, seq: int, history: Sequence[int]) -> None:
        """The answer, and the end of its prompt (where a resent history has its new message), go
        to the generation's pool."""
        key = self._pool_keys.pop(seq, None)
        if key is not None:
            name, n_prompt = key
            self.pool.add(name, history[max(0, n_prompt - defaults.LOOKUP_POOL_PROMPT_TAIL) :])

    def state(self, seq: int) -> PromptLookup:
        if seq not in self.states:
            self.states[seq] = PromptLookup(*self.tuning.ngrams, k_max=self.tuning.k_max)
        return self.states[seq]

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        out = Proposals()
        for request in requests:
            out.drafts[request.seq] = self.state(request.seq).propose(request.history, request.k)
        return out

    def forget(self, seq: int) -> None:
        super().forget(seq)
        self._pool_keys.pop(seq, None)


def build(sources: Sources) -> LookupDrafter:
    """Prompt lookup needs nothing but the history: every session has it."""
    return LookupDrafter()
