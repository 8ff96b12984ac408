"""Reusing a run of cached tokens that a new prompt holds further on than where it parts from the
cache: llama.cpp's `--cache-reuse`, extended to text inserted before the run.

An editor's requests share the other files' chunks and most of the code around the cursor, but the
line at the cursor changes between two of them, and a prompt that parts from the cache there loses
everything after it: the suffix, hundreds of tokens, read again on every keystroke. Here the
longest run of at least `min_run` tokens that the cache and the new prompt both hold after the
point where they part is kept: the tokens before it that changed are read at their new positions,
and the run's cells are moved to its new positions (llama.cpp shifts their keys' rotary encoding).

llama.cpp takes a batch for a sequence only at the position after the last it holds, so the run
waits on a spare sequence (the context's `spare`, never given to a request) while the changed
tokens are read, then joins the sequence again.

The run's cells were computed after the text that came before it then, not now: the answer may
differ from the one a prompt read from scratch gets, as with llama.cpp's --cache-reuse (a greedy
answer is still the same with speculation as without: both read the same cache). So it is off by
default, and only for caches of positions (attention without a sliding window).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from .lib import _llama

KEY = 8  # tokens a run is first matched by; a run is extended from there
CANDIDATES = 32  # places of the cache a run may start at, per position of the prompt


def longest_run(old: Sequence[int], new: Sequence[int], start: int, min_run: int) -> tuple[int, int, int] | None:
    """The longest run (old position, new position, length) of at least `min_run` tokens that `old`
    and `new` both hold at or after `start`, or None. Runs are found by their first KEY tokens (at
    most CANDIDATES places each, the nearest), so a prompt of many repeated lines costs no more than
    a fixed number of comparisons per token."""
    if min_run <= 0 or len(old) - start < min_run or len(new) - start < min_run:
        return None
    key = min(KEY, min_run)
    at: dict[tuple[int, ...], list[int]] = {}
    for i in range(start, len(old) - key + 1):
        at.setdefault(tuple(old[i : i + key]), []).append(i)
    best: tuple[int, int, int] | None = None
    p = start
    while p + key <= len(new):
        longest, where = 0, -1
        places = at.get(tuple(new[p : p + key]), ())
        if len(places) > CANDIDATES:  # those nearest p: an edit moves text by little
            mid = bisect.bisect_left(places, p)
            places = places[max(0, mid - CANDIDATES // 2) : mid + CANDIDATES // 2]
        for c in places:
            n = key
            while c + n < len(old) and p + n < len(new) and old[c + n] == new[p + n]:
                n += 1
            if n > longest:
                longest, where = n, c
        if longest >= min_run:
            if best is None or longest > best[2]:
                best = (where, p, longest)
            p += longest  # a later start inside this run finds a part of it
        else:
            p += 1
    return best


class KVReuse:
    """Context's reuse of a run of its cache (see the module docstring); a mixin of Context."""

    @property
    def reuses_runs(self) -> bool:
        """Whether runs of this cache can be moved: positions, no sliding window, a spare sequence."""
        return (
            self.spare is not None
            and self.rewind == "positions"
            and not self.pins
            and bool(_llama().llama_memory_can_shift(self.memory))
        )

    def reuse_run(
        self,
        seq: int,
        prompt: Sequence[int],
        keep: int,
        min_run: int,
        make_room: Callable[[int], None] | None = None,
    ) -> int:
        """Keep the `keep` tokens of `seq` that `prompt` starts with, and the longest later run of
        at least `min_run` cached tokens that `prompt` holds too (before its last token, whose
        logits the first step needs), reading the prompt's tokens between them. Returns how many
        of the prompt's tokens `seq` now holds (`keep` when no run pays). `make_room(cells)` frees
        cells of other sequences' kept caches for the tokens read."""
        old = self.tokens[seq]
        if not self.reuses_runs or min_run <= 0 or keep >= len(old):
            return keep
        found = longest_run(old, prompt[: len(prompt) - 1], keep, min_run)
        if found is None:
            return keep
        c, p, n = found
        if make_room is not None and p > keep:
            make_room(p - keep)  # asked while the run still counts as the sequence's: the cells then are right
        lib = _llama()
        memory, spare = self.memory, self.spare
        lib.llama_memory_seq_rm(memory, spare, -1, -1)
        lib.llama_memory_seq_cp(memory, seq, spare, c, c + n)  # the run waits on the spare sequence
        self.trim(seq, keep)
        try:
            if p > keep:
                self.feed(seq, prompt[keep:p], "none")  # what changed before the run, at its new positions
        except BaseException:
            lib.llama_memory_seq_rm(memory, spare, -1, -1)
            raise
        if p != c:
            lib.llama_memory_seq_add(memory, spare, c, c + n, p - c)
        lib.llama_memory_seq_cp(memory, spare, seq, p, p + n)
        lib.llama_memory_seq_rm(memory, spare, -1, -1)
        self.tokens[seq].extend(prompt[p : p + n])
        self._last_call[seq] = 0
        self.reused_tokens += n
        return p + n
