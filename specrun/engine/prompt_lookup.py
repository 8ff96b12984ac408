"""Prompt lookup: draft by copying what followed the latest earlier occurrence of the history's end.

Answers that quote the prompt (code edits, summaries, reformatting) repeat long stretches of it, and
finding them costs microseconds instead of a draft model's decode per token.
"""

from __future__ import annotations

from typing import Sequence

from .drafters import Draft


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
        if len(history) >= len(old) and history[: len(old)] == old:
            keep = len(old)
        else:
            keep = _common_prefix(old, history)
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

    def _keys_ending_at(self, end: int):
        tokens = self.tokens
        for n in range(self.n_min, min(self.n_max, end) + 1):
            yield tuple(tokens[end - n : end])

    def _extend(self, new: Sequence[int]) -> None:
        first_end = max(len(self.tokens), 1)
        self.tokens.extend(new)
        for end in range(first_end, len(self.tokens)):
            for key in self._keys_ending_at(end):
                self._ends.setdefault(key, []).append(end)

    def _drop_from(self, keep: int) -> None:
        """Forget tokens from `keep` on, and the entries whose following token was among them."""
        for end in range(len(self.tokens) - 1, max(keep, 1) - 1, -1):
            for key in self._keys_ending_at(end):
                ends = self._ends[key]
                ends.pop()
                if not ends:
                    del self._ends[key]
        del self.tokens[keep:]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PromptLookupDrafter:
    """Proposes the continuation of the longest, then most recent, n-gram match of the history's end.

    A match of n tokens may draft up to `draft_length(n)` = 2^(n-1) tokens (capped by `max_draft` and
    k): one matching token is weak evidence, a long match usually means the text is being copied.
    Matches up to 8 tokens are looked for because code repeats short runs (indentation, `self.`,
    closing brackets) in many places, and only a longer match finds the place actually being copied.
    Copying runs on through its own draft, so a repeating pattern continues past the history's end.

    Confidence is the chance that each drafted token is accepted, estimated per match length from
    recent outcomes (prior n/(n+1)). Outcomes come from `feedback`, or, when the draft got none (a
    hybrid or the auto controller chose another option, or cut the draft to nothing), from comparing
    it with the tokens the history gained since: the target's own tokens are what a verifier would
    have checked it against, so the estimate stays calibrated while the lookup sits unused.
    """

    name = "ngram"

    def __init__(
        self,
        ngram_min: int = 1,
        ngram_max: int = 8,
        max_draft: int = 16,
        *,
        decay: float = 0.95,
        prior_weight: float = 4.0,
    ):
        self.index = NgramIndex(ngram_min, ngram_max)
        self.max_draft = max_draft
        self.decay = decay
        self.prior_weight = prior_weight
        # Per match length: the first drafted token, and the tokens after an accepted one, apart:
        # matches either fail at once or copy a long run, which one rate per token misjudges.
        self._first = [[0.0, 0.0] for _ in range(ngram_max + 1)]  # [successes, trials]
        self._rest = [[0.0, 0.0] for _ in range(ngram_max + 1)]
        self._pending: tuple[int, int, list[int]] | None = None  # (history length, n, tokens)

    def draft_length(self, n: int) -> int:
        """Most tokens a match of length n may draft."""
        return min(self.max_draft, 2 ** (n - 1))

    def confidence(self, n: int, position: int = 2) -> float:
        """Estimated acceptance of a drafted token from a match of length n, given that the tokens
        before it were accepted: position 1 (the first) and later positions are estimated apart."""
        successes, trials = self._first[n] if position == 1 else self._rest[n]
        prior = n / (n + 2) if position == 1 else n / (n + 1)
        w = self.prior_weight
        return (successes + w * prior) / (trials + w)

    def confidences(self, n: int, length: int) -> list[float]:
        return [self.confidence(n, 1)] + [self.confidence(n, 2)] * (length - 1) if length else []

    def propose(self, history: Sequence[int], k: int) -> Draft:
        keep = self.index.sync(history)
        self._check_unused(keep)
        match = self.index.longest_match() if k > 0 else None
        if match is None:
            return Draft()
        n, end = match
        tokens = self.index.tokens
        size = len(tokens)
        out: list[int] = []
        for i in range(min(k, self.draft_length(n))):
            src = end + i
            out.append(tokens[src] if src < size else out[src - size])
        self._pending = (size, n, out)
        return Draft(out, None, self.confidences(n, len(out)))

    def feedback(self, drafted: int, accepted: int) -> None:
        """Learn from the verified outcome of the last proposal."""
        if self._pending is not None:
            _, n, _ = self._pending
            self._pending = None
            self._learn(n, accepted, failed=accepted < drafted)

    def _check_unused(self, keep: int) -> None:
        """Score a proposal that got no feedback against the tokens that followed it."""
        if self._pending is None:
            return
        start, n, draft = self._pending
        self._pending = None
        if keep < start:
            return  # the history was rewritten: the outcome is unknown
        actual = self.index.tokens[start : start + len(draft)]
        matched = _common_prefix(draft, actual)
        if actual:
            self._learn(n, matched, failed=matched < len(actual))

    def _learn(self, n: int, successes: int, failed: bool) -> None:
        for table in (self._first, self._rest):
            for row in table:
                row[0] *= self.decay
                row[1] *= self.decay
        self._first[n][1] += 1
        if successes:
            self._first[n][0] += 1
            self._rest[n][0] += successes - 1
            self._rest[n][1] += successes - 1 + (1 if failed else 0)
