"""Reusing runs of cached tokens that a new prompt holds further on than where it parts from the
cache: llama.cpp's `--cache-reuse`, extended to text inserted before a run.

An editor's requests share the other files' chunks and most of the code around the cursor, but the
line at the cursor changes between two of them, and a prompt that parts from the cache there loses
everything after it: the suffix, hundreds of tokens, read again on every keystroke. When a line is
added above the cursor the window of lines sent before it moves too, so the prefix itself starts a
little later. Here every run of at least `min_run` tokens that the cache and the new prompt both
hold, in the same order, after the point where they part is kept: the tokens between the runs that
changed are read at their new positions, and each run's cells are moved to its new positions
(llama.cpp shifts their keys' rotary encoding).

llama.cpp takes a batch for a sequence only at the position after the last it holds, so the runs
wait on a spare sequence (the context's `spare`, never given to a request) while the tokens before
each are read, and join the sequence one by one. On the spare the runs are moved to their new
positions first, as memmove copies: those moving down in order, then those moving up in reverse,
so that no run passes over one not yet moved.

A run's cells were computed after the text that came before it then, not now: the answer may
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
Run = tuple[int, int, int]  # old position, new position, length


def longest_run(
    old: Sequence[int],
    new: Sequence[int],
    start: int,
    min_run: int,
    old_end: int | None = None,
    new_start: int | None = None,
    new_end: int | None = None,
) -> Run | None:
    """The longest run of at least `min_run` tokens that `old[start:old_end]` and
    `new[new_start:new_end]` both hold (`new_start` defaults to `start`), or None. Runs are found
    by their first KEY tokens (at most CANDIDATES places each, the nearest), so a prompt of many
    repeated lines costs no more than a fixed number of comparisons per token."""
    old_end = len(old) if old_end is None else old_end
    new_start = start if new_start is None else new_start
    new_end = len(new) if new_end is None else new_end
    if min_run <= 0 or old_end - start < min_run or new_end - new_start < min_run:
        return None
    key = min(KEY, min_run)
    at: dict[tuple[int, ...], list[int]] = {}
    for i in range(start, old_end - key + 1):
        at.setdefault(tuple(old[i : i + key]), []).append(i)
    best: Run | None = None
    p = new_start
    while p + key <= new_end:
        places = at.get(tuple(new[p : p + key]), ())
        if len(places) > CANDIDATES:  # those nearest p: an edit moves text by little
            mid = bisect.bisect_left(places, p)
            places = places[max(0, mid - CANDIDATES // 2) : mid + CANDIDATES // 2]
        longest, where = 0, -1
        for c in places:
            n = key
            while c + n < old_end and p + n < new_end and old[c + n] == new[p + n]:
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


def shared_runs(old: Sequence[int], new: Sequence[int], start: int, min_run: int) -> list[Run]:
    """Runs of at least `min_run` tokens that `old` and `new` both hold from `start` on, in the
    same order in both: the longest, then the longest on either side of it, and so on."""
    found: list[Run] = []

    def between(c0: int, c1: int, p0: int, p1: int) -> None:
        run = longest_run(old, new, c0, min_run, c1, p0, p1)
        if run is None:
            return
        c, p, n = run
        between(c0, c, p0, p)
        found.append(run)
        between(c + n, c1, p + n, p1)

    between(start, len(old), start, len(new))
    return found


class KVReuse:
    """Context's reuse of runs of its cache (see the module docstring); a mixin of Context."""

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
        """Keep the `keep` tokens of `seq` that `prompt` starts with, and every later run of at
        least `min_run` cached tokens that `prompt` holds too (before its last token, whose logits
        the first step needs), reading the prompt's tokens between them. Returns how many of the
        prompt's tokens `seq` now holds (`keep` when no run is found). `make_room(cells)` frees
        cells of other sequences' kept caches for the tokens read."""
        old = self.tokens[seq]
        if not self.reuses_runs or min_run <= 0 or keep >= len(old):
            return keep
        runs = shared_runs(old, prompt[: len(prompt) - 1], keep, min_run)
        if not runs:
            return keep
        reads = sum(p - end for (_, p, _), end in zip(runs, [keep] + [p + n for _, p, n in runs[:-1]]))
        if make_room is not None and reads:
            make_room(reads)  # asked while the runs still count as the sequence's: the cells then are right
        lib = _llama()
        memory, spare = self.memory, self.spare
        lib.llama_memory_seq_rm(memory, spare, -1, -1)
        for c, _, n in runs:  # the runs wait on the spare sequence
            lib.llama_memory_seq_cp(memory, seq, spare, c, c + n)
        self.trim(seq, keep)
        try:
            down = [run for run in runs if run[1] < run[0]]
            up = [run for run in runs if run[1] > run[0]]
            for c, p, n in down + up[::-1]:
                lib.llama_memory_seq_add(memory, spare, c, c + n, p - c)
            held = keep
            for _, p, n in runs:
                if p > held:
                    self.feed(seq, prompt[held:p], "none")  # what changed before the run, at its new positions
                lib.llama_memory_seq_cp(memory, spare, seq, p, p + n)
                self.tokens[seq].extend(prompt[p : p + n])
                held = p + n
        finally:
            lib.llama_memory_seq_rm(memory, spare, -1, -1)
        self._last_call[seq] = 0
        self.reused_tokens += sum(n for _, _, n in runs)
        self.run_reads += reads
        return held
