"""Logits → next-token distributions with llama.cpp's transform order, and a seeded RNG.

Target (p) and draft (q) rows go through the same `SamplingParams.dist`, as speculative sampling
requires. Order follows llama.cpp's default chain: top-k, top-p, min-p on the untempered
distribution, then temperature over the survivors. Temperature 0 means greedy: a point mass on the
argmax.

A distribution is kept over its support only (`Dist`: the surviving ids and their probabilities).
The chain leaves a few dozen candidates of a vocabulary of 150k. A row is either the whole
vocabulary's logits (then top-k is one threshold pass here) or the shortlist llama.cpp's graph
already cut to top-k (engine/shortlist.py); both give the same distribution.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import Protocol

import numpy as np

from .. import defaults
from .shortlist import Shortlist, argmax

_SUBSAMPLE = 64  # the top-k threshold is found on every 64th logit first (see top_ids)
_FEW = 256  # survivors of top-k up to this many are transformed in plain Python (see SamplingParams.dist)


def top_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest logits, in no particular order (all ids when k is 0 or at least n).

    Any threshold that at least k logits reach leaves a pool holding the exact top k, found by a
    partition of the pool alone. The k-th largest of a strided subsample is such a threshold (the
    subsample's own top k reach it) but leaves a pool of about k * 64; a higher order statistic of
    the subsample usually reaches k too and leaves a pool a tenth of that size, so it is tried
    first and checked."""
    n = logits.shape[0]
    if k <= 0 or k >= n:
        return np.arange(n)
    sub = logits[::_SUBSAMPLE]
    m = sub.shape[0]
    pool = None
    for rank in (max(1, k // 10), k):
        if m <= rank:
            break
        pool = np.flatnonzero(logits >= np.partition(sub, m - rank)[m - rank])
        if pool.shape[0] >= k:
            break
    if pool is None or pool.shape[0] < k:
        pool = np.arange(n)
    if pool.shape[0] > k:
        pool = pool[np.argpartition(logits[pool], pool.shape[0] - k)[pool.shape[0] - k :]]
    return pool


class Rng(Protocol):
    """Where draws come from: a sequence's Uniforms, or a numpy generator."""

    def random(self) -> float: ...


@dataclass(frozen=True)
class Dist:
    """A next-token distribution over its support: ids in ascending order and their probabilities.

    Kept as Python tuples: a support is a few dozen tokens, and right after a CPU pass has flushed
    the caches each numpy call over so few numbers costs more than the arithmetic. Sampling walks
    the ids in ascending order with one uniform, which draws exactly the token that inverse-CDF
    sampling over the whole vocabulary's vector would."""

    ids: tuple[int, ...]  # ascending, no repeats
    p: tuple[float, ...]  # same length, sums to 1

    @classmethod
    def point(cls, token: int) -> Dist:
        return cls((int(token),), (1.0,))

    @classmethod
    def of(cls, ids: np.ndarray, weights: np.ndarray) -> Dist:
        """Normalised weights on ids (any order; zero weights dropped)."""
        order = np.argsort(ids, kind="stable")
        ids, weights = np.asarray(ids, dtype=np.int64)[order], np.asarray(weights, dtype=np.float64)[order]
        keep = weights > 0
        ids, weights = ids[keep], weights[keep]
        return cls(tuple(ids.tolist()), tuple((weights / weights.sum()).tolist()))

    def prob(self, token: int) -> float:
        i = bisect_left(self.ids, token)
        return self.p[i] if i < len(self.ids) and self.ids[i] == token else 0.0

    def top(self) -> float:
        """The largest probability."""
        return max(self.p)

    def sample(self, rng: Rng) -> int:
        """One draw, with one uniform from `rng`."""
        cumulative = list(accumulate(self.p))
        u = rng.random() * cumulative[-1]
        return self.ids[min(bisect_right(cumulative, u), len(self.ids) - 1)]

    def without(self, token: int) -> Dist | None:
        """Renormalised with `token` removed (None when nothing is left)."""
        kept = [(i, p) for i, p in zip(self.ids, self.p) if i != token]
        return _normalised(kept)

    def minus(self, q: Dist) -> Dist | None:
        """normalise(max(0, p − q)): the residual of speculative sampling (None when it is empty)."""
        return _normalised([(i, p - q.prob(i)) for i, p in zip(self.ids, self.p)])

    def dense(self, n: int) -> np.ndarray:
        """As a vector over a vocabulary of n."""
        out = np.zeros(n, dtype=np.float64)
        out[list(self.ids)] = self.p
        return out


def _normalised(weighted: list[tuple[int, float]]) -> Dist | None:
    """The distribution of the positive weights of (id, weight) pairs in ascending id order (None
    when none is positive)."""
    kept = [(i, w) for i, w in weighted if w > 0]
    if not kept:
        return None
    total = sum(w for _, w in kept)
    return Dist(tuple(i for i, _ in kept), tuple(w / total for _, w in kept))


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings shared by target and draft."""

    temperature: float = defaults.TEMPERATURE
    top_k: int = defaults.TOP_K
    top_p: float = defaults.TOP_P
    min_p: float = defaults.MIN_P

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @property
    def shortlist(self) -> int:
        """How many candidates of a row this sampling needs (see engine/shortlist.py): 1 when
        greedy, top-k's k, or 0 when it needs the whole row (top-k off or too wide to pay)."""
        if self.greedy:
            return 1
        return self.top_k if 0 < self.top_k <= defaults.SHORTLIST_MAX else 0

    def dist(self, logits: np.ndarray | Shortlist) -> Dist:
        """The distribution after all transforms (a point mass on the argmax when greedy), from a
        full row or from its top-k shortlist.

        Top-k leaves a few dozen survivors, which are transformed in plain Python: right after a
        pass has flushed the CPU's caches, each numpy call over a handful of numbers costs more
        than the arithmetic itself."""
        if self.greedy:
            return Dist.point(argmax(logits))
        if isinstance(logits, Shortlist):
            ids, values = logits.ids, logits.logits
            if 0 < self.top_k < len(ids):
                ids, values = np.asarray(ids), np.asarray(values)
                keep = top_ids(values, self.top_k)
                ids, values = ids[keep], values[keep]
        else:
            ids = top_ids(logits, self.top_k)
            values = logits[ids]
        if len(ids) > _FEW:
            ids, kept = self._many(np.asarray(values), np.asarray(ids))
            return Dist.of(ids, np.exp((kept - kept[0]) / self.temperature))
        kept = self._few(_as_list(values), _as_list(ids))
        best, temperature = kept[0][0], self.temperature
        by_id = sorted((token, math.exp((logit - best) / temperature)) for logit, token in kept)
        total = sum(weight for _, weight in by_id)
        return Dist(tuple(token for token, _ in by_id), tuple(weight / total for _, weight in by_id))

    def _few(self, values: list[float], ids: list[int]) -> list[tuple[float, int]]:
        """Top-p and min-p over the survivors of top-k (their logits and ids): (untempered logit,
        id) pairs, highest first."""
        kept = sorted(zip(values, ids), key=_negated_logit)
        if self.top_p < 1.0 or self.min_p > 0.0:
            best = kept[0][0]
            weights = [math.exp(logit - best) for logit, _ in kept]  # p / p_max
            if self.top_p < 1.0:
                total, reached, cut = sum(weights), 0.0, len(kept)
                for i, weight in enumerate(weights):
                    reached += weight / total
                    if reached >= self.top_p:
                        cut = i + 1
                        break
                kept, weights = kept[:cut], weights[:cut]
            if self.min_p > 0.0:
                kept = [pair for pair, weight in zip(kept, weights) if weight >= self.min_p]
        return kept

    def _many(self, values: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`_few`'s transforms in numpy, for more than _FEW survivors (top-k off or wide): ids and
        untempered logits, highest first."""
        order = np.argsort(-values, kind="stable")
        ids, kept = ids[order], values[order].astype(np.float64)
        if self.top_p < 1.0 or self.min_p > 0.0:
            weights = np.exp(kept - kept[0])
            if self.top_p < 1.0:
                cumulative = np.cumsum(weights / weights.sum())
                cut = int(np.searchsorted(cumulative, self.top_p)) + 1
                ids, kept, weights = ids[:cut], kept[:cut], weights[:cut]
            if self.min_p > 0.0:
                keep = weights >= self.min_p
                ids, kept = ids[keep], kept[keep]
        return ids, kept

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """The same distribution as a full-vocabulary vector."""
        return self.dist(logits).dense(logits.shape[0])

    def pick(self, logits: np.ndarray | Shortlist, rng: Rng) -> int:
        """The next token from one row of logits (or its shortlist): the argmax, or a draw."""
        return argmax(logits) if self.greedy else self.dist(logits).sample(rng)


def _as_list(values) -> list:
    return values if isinstance(values, list) else values.tolist()


def _negated_logit(pair: tuple[float, int]) -> float:
    return -pair[0]


def sample(probs: np.ndarray, rng: Rng) -> int:
    """Draw one token id from a probability vector (inverse CDF: one uniform, reproducible)."""
    cumulative = np.cumsum(probs)
    u = rng.random() * cumulative[-1]
    return int(min(np.searchsorted(cumulative, u, side="right"), len(probs) - 1))


class Uniforms:
    """A seeded source of uniform draws in [0, 1), what sampling and verification take from a
    sequence's generator. They are numpy's, in numpy's order, drawn a block at a time: a block is
    what as many single draws give, so a seed repeats, while a single numpy draw is slow right
    after a CPU pass has flushed the caches."""

    BLOCK = 64

    def __init__(self, seed: int | None):
        self._generator = np.random.default_rng(seed)
        self._block: list[float] = []
        self._next = 0

    def random(self) -> float:
        if self._next == len(self._block):
            self._block, self._next = self._generator.random(self.BLOCK).tolist(), 0
        value = self._block[self._next]
        self._next += 1
        return value


def make_rng(seed: int | None) -> Uniforms:
    """A sequence's seeded source of uniforms; None draws a fresh seed."""
    return Uniforms(seed)
