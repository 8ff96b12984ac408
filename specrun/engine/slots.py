"""Sequence ids of the shared contexts: which are answering a request, and which keep the cache of
a finished one for a follow-up.

A chat's next turn repeats the whole conversation before its new message; finding that prefix in
the cache of the previous turn's sequence means only the new message is read. So a finished
request's sequence keeps its cache, and a new request takes the free sequence whose cache shares
the longest prefix with its prompt; with none sharing anything, an empty sequence, else the one
used least recently. When the shared pool of cells runs short, the least recently used caches are
dropped first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence


class SlotPool:
    """`n` sequence ids; `prefix(seq, tokens)` says how many leading tokens a sequence's cache shares."""

    def __init__(self, n: int, prefix: Callable[[int, Sequence[int]], int], size: Callable[[int], int]):
        self.n = n
        self._prefix = prefix
        self._size = size
        self.busy: set[int] = set()
        self._used: dict[int, int] = {}  # seq → when it was last released
        self._clock = itertools.count(1)

    def free(self) -> list[int]:
        return [s for s in range(self.n) if s not in self.busy]

    def claim(self, prompt: Sequence[int]) -> tuple[int, int]:
        """A free sequence for `prompt`, and how many of its leading tokens that sequence holds."""
        free = self.free()
        if not free:
            raise RuntimeError("no free sequence")
        shared = {s: self._prefix(s, prompt) for s in free}
        best = max(free, key=lambda s: (shared[s], self._used.get(s, 0)))
        if shared[best] == 0:
            empty = [s for s in free if self._size(s) == 0]
            best = empty[0] if empty else min(free, key=lambda s: self._used.get(s, 0))
        self.busy.add(best)
        return best, shared[best]

    def release(self, seq: int) -> None:
        """The request on `seq` is done; its cache stays for a follow-up."""
        self.busy.discard(seq)
        self._used[seq] = next(self._clock)

    def evictable(self) -> list[int]:
        """Free sequences holding a cache, least recently used first."""
        return sorted((s for s in self.free() if self._size(s)), key=lambda s: self._used.get(s, 0))
