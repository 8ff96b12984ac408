"""Moving a sequence's caches between the engine's contexts and the prompt cache in RAM
(prompt_cache.py holds the entries): saved when a sequence gives its cache up or cuts it back,
restored when a new prompt shares more with an entry than with what its sequence holds."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .. import defaults
from .drafting.protocol import Drafter
from .llama import Context
from .prompt_cache import TARGET, PromptCache, Saved


class CacheKeeper:
    """The engine's side of its prompt cache: `make_room(ctx, cells)` frees cells of a context and
    `drop(seq)` forgets a sequence's caches, as the engine does them."""

    def __init__(
        self,
        cache: PromptCache,
        target: Context,
        drafters: Mapping[str, Drafter],
        make_room: Callable[[Context, int], None],
        drop: Callable[[int], None],
    ):
        self.cache = cache
        self.target = target
        self.drafters = drafters
        self.make_room = make_room
        self.drop = drop

    def save(self, seq: int) -> None:
        """Keep what `seq` caches in the prompt cache, unless an entry there already serves it."""
        tokens = self.target.tokens[seq]
        whole = not self.target.cuts_restored
        if not tokens or self.cache.covers(tokens, whole):
            return
        data = self.target.save(seq)
        if data is None:
            return
        states = {TARGET: (list(tokens), data)}
        for drafter in self.drafters.values():
            if drafter.saved_with_target and drafter.ctx is not None and drafter.ctx.tokens[seq]:
                saved = drafter.ctx.save(seq)
                if saved is not None:
                    states[drafter.name] = (list(drafter.ctx.tokens[seq]), saved)
        self.cache.add(Saved(np.asarray(tokens, dtype=np.int32), states, whole))

    def save_before_cut(self, seq: int, keep: int) -> None:
        """A cache about to lose tokens that some later prompt may want is saved first, when what
        it loses is worth the copy: a save copies the state of every token the cache holds, so a
        cut of a few tokens off a long cache (an agent's next turn after a short answer) is not
        saved, while a cut of a conversation's own part is (SAVE_BEFORE_CUT_SHARE)."""
        held = len(self.target.tokens[seq])
        lost = held - keep
        if lost >= defaults.PROMPT_CACHE_MIN_GAIN and lost * defaults.SAVE_BEFORE_CUT_SHARE >= held:
            self.save(seq)

    def restore(self, seq: int, prompt: Sequence[int], keep: int, kept: int) -> int:
        """Restore into `seq` the saved cache serving the most of `prompt`, when it spares reading
        PROMPT_CACHE_MIN_GAIN more tokens than `seq` keeps of the `keep` it shares (`kept`: a
        recurrent cache cut back keeps only what its checkpoint holds); returns how many tokens
        `seq` now shares. A state llama.cpp refuses is a miss and is dropped."""
        cache = self.cache
        entry, n = cache.find(prompt, len(prompt) - 1)
        if entry is None or n < kept + defaults.PROMPT_CACHE_MIN_GAIN:
            cache.misses += 1
            return keep
        cache.touch(entry)  # the most recently used now: caches saved below drop others first
        self.save(seq)
        self.drop(seq)
        tokens, data = entry.states[TARGET]
        self.make_room(self.target, len(tokens))
        if not self.target.load(seq, tokens, data):
            cache.discard(entry)
            cache.failures += 1
            cache.misses += 1
            return 0
        for drafter in self.drafters.values():
            if drafter.name in entry.states and drafter.ctx is not None:
                own, saved = entry.states[drafter.name]
                self.make_room(drafter.ctx, len(own))
                if not drafter.ctx.load(seq, own, saved):
                    drafter.forget(seq)
        cache.hits += 1
        cache.restored_tokens += n
        return n
