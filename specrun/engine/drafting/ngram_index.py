"""An index of every short n-gram in a token history, kept in step with the history as it grows.

Prompt lookup asks it where the history's last n tokens occurred before; answers must come in
microseconds, since they are asked for before every step.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..llama import common_prefix

BULK = 32  # tokens appended at once beyond which they are indexed n by n (a prompt), not token by token


class NgramIndex:
    """For every n-gram (n_min ≤ n ≤ n_max) of a token list, the positions right after it, oldest first.

    Only n-grams followed by at least one token are indexed, so the history's own suffix never
    matches itself. `sync` follows the history incrementally: appended tokens are indexed, and when
    the history was rewritten or shortened (a new chat, a regenerated answer) the entries past the
    common prefix are removed first.
    """

    def __init__(self, n_min: int, n_max: int):
        if not 1 <= n_min <= n_max:
            raise ValueError("need 1 <= ngram_min <= ngram_max")
        self.n_min = n_min
        self.n_max = n_max
        self.tokens: list[int] = []
        self._ends: dict[tuple[int, ...], list[int]] = {}

    def sync(self, history: Sequence[int]) -> int:
        """Make the index describe `history`; returns how many leading tokens were already indexed."""
        old = self.tokens
        if not isinstance(history, list):
            history = [int(t) for t in history]
        keep = common_prefix(old, history)
        if keep < len(old):
            self._drop_from(keep)
        self._extend(history[keep:])
        return keep

    def longest_match(self) -> tuple[int, int] | None:
        """(n, end) for the longest n whose final n tokens occurred before; `end` is the most recent
        position right after such an occurrence. None when no n-gram of length ≥ n_min recurs."""
        tokens, size = self.tokens, len(self.tokens)
        for n in range(min(self.n_max, size), self.n_min - 1, -1):
            ends = self._ends.get(tuple(tokens[size - n :]))
            if ends:
                return n, ends[-1]
        return None

    def ends(self, ngram: Sequence[int]) -> list[int]:
        """Positions right after each occurrence of `ngram` (n_min ≤ len ≤ n_max), ascending."""
        return self._ends.get(tuple(ngram), [])

    def _keys_ending_at(self, end: int):
        tokens = self.tokens
        for n in range(self.n_min, min(self.n_max, end) + 1):
            yield tuple(tokens[end - n : end])

    def _extend(self, new: Sequence[int]) -> None:
        first_end = max(len(self.tokens), 1)
        self.tokens.extend(new)
        if len(new) > BULK:
            self._extend_bulk(first_end)
            return
        for end in range(first_end, len(self.tokens)):
            for key in self._keys_ending_at(end):
                self._ends.setdefault(key, []).append(end)

    def _extend_bulk(self, first_end: int) -> None:
        """Index the n-grams ending at first_end.. one n at a time, each n's keys built by zip in C
        (a prompt is indexed in about half the time; per token, each key's positions stay in order)."""
        tokens, total, ends = self.tokens, len(self.tokens), self._ends
        for n in range(self.n_min, self.n_max + 1):
            low = max(first_end, n)
            if low >= total:
                continue
            for end, key in enumerate(zip(*(tokens[low - n + i : total - n + i] for i in range(n))), low):
                ends.setdefault(key, []).append(end)

    def _drop_from(self, keep: int) -> None:
        """Forget tokens from `keep` on, and the entries whose following token was among them."""
        for end in range(len(self.tokens) - 1, max(keep, 1) - 1, -1):
            for key in self._keys_ending_at(end):
                ends = self._ends[key]
                ends.pop()
                if not ends:
                    del self._ends[key]
        del self.tokens[keep:]
