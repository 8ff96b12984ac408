"""Caches of finished requests kept in host RAM, so a conversation that comes back is not read again.

An agent or an editor resends its whole history every turn, and a user has more conversations
than the server has sequences: the cache a sequence gives up (evicted for another request, or cut
back for a prompt that parts early) is saved here, keyed by its tokens, and a new request takes the
saved state sharing the longest prefix with its prompt, reading only the rest. Entries are dropped
least recently used first once their bytes pass the budget.

An entry whose target cache is made of positions serves any prefix of its tokens (the restored
cache is cut back). One whose cache cannot be cut exactly (a recurrent state is right only at the
position it was saved at; a sliding window's old cells are not saved with the sequence) serves only
a prompt that starts with all its tokens: such targets are saved where the next prompt is likely
to part (message boundaries, the end of each prompt) as well as when their cache is given up.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

TARGET = "target"  # the key of the target's state among an entry's states


@dataclass
class Saved:
    """One saved cache: the target's tokens and, per context (the target, and drafters whose cache
    follows it), the tokens it held and its serialised state."""

    tokens: np.ndarray  # int32: the target's tokens
    states: dict[str, tuple[list[int], np.ndarray]]
    whole: bool  # only a prompt starting with all of `tokens` may use it
    used: int = 0
    counted: int = 0  # its bytes as the cache counted them when it was added
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def nbytes(self) -> int:
        return self.tokens.nbytes + sum(data.nbytes + 8 * len(tokens) for tokens, data in self.states.values())


_ids = itertools.count(1)


def _shared(saved: np.ndarray, prompt: np.ndarray) -> int:
    """Length of the longest common prefix of two token arrays."""
    n = min(len(saved), len(prompt))
    if n == 0:
        return 0
    same = saved[:n] == prompt[:n]
    return n if same.all() else int(np.argmin(same))


class PromptCache:
    """Saved caches within `budget` bytes, with what a server reports of them."""

    def __init__(self, budget: int):
        self.budget = max(0, int(budget))
        self.entries: dict[int, Saved] = {}
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.failures = 0  # restores llama.cpp refused (counted as misses too)
        self.restored_tokens = 0
        self._clock = itertools.count(1)

    def find(self, prompt: Sequence[int], limit: int) -> tuple[Saved | None, int]:
        """The entry serving the most of `prompt`'s first `limit` tokens, and how many it serves."""
        head = np.asarray(prompt[:limit], dtype=np.int32)
        best, best_n = None, 0
        for entry in self.entries.values():
            n = _shared(entry.tokens, head)
            if entry.whole and n < len(entry.tokens):
                n = 0
            if n > best_n or (n == best_n and best is not None and n and entry.used > best.used):
                best, best_n = entry, n
        return best, best_n

    def covers(self, tokens: Sequence[int], whole: bool) -> bool:
        """Whether an entry already serves every prompt a cache of `tokens` would."""
        candidate = Saved(np.asarray(tokens, dtype=np.int32), {}, whole, id=0)
        return any(self._superseded(candidate, entry) for entry in self.entries.values())

    def add(self, saved: Saved) -> bool:
        """Keep `saved` (most recently used), dropping the entries it makes useless and then the least
        recently used until the budget holds. False when it alone is larger than the budget."""
        if saved.nbytes > self.budget:
            return False
        for entry in list(self.entries.values()):
            if self._superseded(entry, saved):
                self.discard(entry)
        saved.used = next(self._clock)
        saved.counted = saved.nbytes
        self.entries[saved.id] = saved
        self.bytes += saved.counted
        while self.bytes > self.budget:
            self.discard(min(self.entries.values(), key=lambda e: e.used))
        return True

    @staticmethod
    def _superseded(old: Saved, new: Saved) -> bool:
        """`new` serves every prompt `old` serves: it holds all of old's tokens and can be cut where
        old could."""
        if len(new.tokens) < len(old.tokens) or _shared(new.tokens, old.tokens) < len(old.tokens):
            return False
        return not new.whole or (old.whole and len(new.tokens) == len(old.tokens))

    def touch(self, saved: Saved) -> None:
        saved.used = next(self._clock)

    def discard(self, saved: Saved) -> None:
        if self.entries.pop(saved.id, None) is not None:
            self.bytes -= saved.counted

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    def stats(self) -> dict[str, int]:
        return {
            "entries": len(self.entries),
            "bytes": self.bytes,
            "budget": self.budget,
            "hits": self.hits,
            "misses": self.misses,
            "failures": self.failures,
            "restored_tokens": self.restored_tokens,
        }
