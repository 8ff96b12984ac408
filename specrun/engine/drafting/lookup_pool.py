"""Earlier prompts and answers, kept for prompt lookup across requests.

An agent's later turns, an editor's next inline edit, a second conversation on the same file: their
answers repeat what earlier answers said, which their own prompt may no longer hold (a template
that drops old answers, a request that sends only the file). The pool keeps those texts, one pool
per key (a client, or a conversation's opening), so unrelated requests never draft from each
other's text, and a sequence's trust in what the pool proposes is its own (PromptLookup learns it
as one more kind of evidence): a run of failures lowers that sequence's estimate, never the pool.

Memory is bounded in tokens: a key's oldest texts go first, and the least recently used keys.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

SEPARATOR = -1  # between texts: never a token, so no match or continuation runs across it
KEY_TOKENS = 3  # a match is found by its last KEY_TOKENS tokens, then measured backwards
MATCH_MAX = 16  # longest match measured
CANDIDATES = 8  # most recent occurrences measured per lookup


class PoolIndex:
    """One key's texts, oldest first, indexed by every KEY_TOKENS-gram (the positions after it)."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.tokens: list[int] = []
        self.texts: deque[int] = deque()  # each kept text's length, separator included
        self._ends: dict[tuple[int, ...], list[int]] = {}

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, text: Sequence[int]) -> None:
        """Keep `text`, dropping the oldest texts once the key holds more than max_tokens."""
        text = list(text)[-self.max_tokens + 1 :] if len(text) >= self.max_tokens else list(text)
        if len(text) < KEY_TOKENS + 1:
            return
        start = len(self.tokens)
        self.tokens.extend(text)
        self.tokens.append(SEPARATOR)
        self.texts.append(len(text) + 1)
        self._index(max(start, KEY_TOKENS), len(self.tokens) - 1)
        if len(self.tokens) > self.max_tokens:
            self._shrink(self.max_tokens * 3 // 4)

    def _index(self, first_end: int, last_end: int) -> None:
        tokens = self.tokens
        for end in range(first_end, last_end + 1):
            key = tuple(tokens[end - KEY_TOKENS : end])
            if SEPARATOR not in key:
                self._ends.setdefault(key, []).append(end)

    def _shrink(self, target: int) -> None:
        """Drop the oldest texts until at most `target` tokens are left, and index the rest anew."""
        drop = 0
        while self.texts and len(self.tokens) - drop > target:
            drop += self.texts.popleft()
        self.tokens = self.tokens[drop:]
        self._ends = {}
        self._index(KEY_TOKENS, len(self.tokens) - 1)

    def match(self, tail: Sequence[int]) -> tuple[int, int] | None:
        """(n, end): the longest match of `tail`'s last n ≥ KEY_TOKENS tokens among the most recent
        occurrences of its last KEY_TOKENS, and the position right after it; None when none."""
        if len(tail) < KEY_TOKENS:
            return None
        ends = self._ends.get(tuple(tail[-KEY_TOKENS:]))
        if not ends:
            return None
        tokens, best = self.tokens, None
        reach = min(MATCH_MAX, len(tail))
        for end in reversed(ends[-CANDIDATES:]):
            n = KEY_TOKENS
            while n < reach and end - n - 1 >= 0 and tokens[end - n - 1] == tail[-n - 1]:
                n += 1
            if best is None or n > best[0]:
                best = (n, end)
        return best

    def continuation(self, end: int, k: int) -> list[int]:
        """Up to k tokens from `end`, stopping at the end of the text."""
        out = []
        for token in self.tokens[end : end + k]:
            if token == SEPARATOR:
                break
            out.append(token)
        return out


class LookupPool:
    """Pools by key within `max_tokens` in all (each key at most `key_tokens`), least recently used
    keys dropped first."""

    def __init__(self, max_tokens: int, key_tokens: int):
        self.max_tokens = max_tokens
        self.key_tokens = min(key_tokens, max_tokens)
        self._pools: OrderedDict[str, PoolIndex] = OrderedDict()

    @property
    def tokens(self) -> int:
        return sum(len(pool) for pool in self._pools.values())

    def get(self, key: str) -> PoolIndex | None:
        pool = self._pools.get(key)
        if pool is not None:
            self._pools.move_to_end(key)
        return pool

    def add(self, key: str, text: Sequence[int]) -> None:
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = PoolIndex(self.key_tokens)
        self._pools.move_to_end(key)
        pool.add(text)
        while self.tokens > self.max_tokens and len(self._pools) > 1:
            self._pools.popitem(last=False)
