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
from dataclasses import dataclass

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
        pool = pool[np.argpartition(logits[pool], pool.shape[0] - k)[pool.shape[0] - k:]]
    return pool


@dataclass(frozen=True)
class Dist:
    """A next-token distribution over its support: ids in ascending order and their probabilities.

    Sampling walks the ids in ascending order with one uniform, which draws exactly the token that
    inverse-CDF sampling over the whole vocabulary's vector would."""

    ids: np.ndarray  # int64, ascending, no repeats
    p: np.ndarray  # float64, same length, sums to 1

    @classmethod
    def point(cls, token: int) -> "Dist":
        return cls(np.array([token], dtype=np.int64), np.ones(1))

    @classmethod
    def of(cls, ids: np.ndarray, weights: np.ndarray) -> "Dist":
        """Normalised weights on ids (any order; zero weights dropped)."""
        order = np.argsort(ids, kind="stable")
        ids, weights = np.asarray(ids, dtype=np.int64)[order], np.asarray(weights, dtype=np.float64)[order]
        keep = weights > 0
        ids, weights = ids[keep], weights[keep]
        return cls(ids, weights / weights.sum())

    @classmethod
    def from_dense(cls, probs: np.ndarray) -> "Dist":
        """The distribution a full-vocabulary probability vector describes."""
        ids = np.flatnonzero(probs > 0)
        return cls.of(ids, probs[ids])

    def prob(self, token: int) -> float:
        i = int(np.searchsorted(self.ids, token))
        return float(self.p[i]) if i < self.ids.shape[0] and self.ids[i] == token else 0.0

    def top(self) -> float:
        """The largest probability."""
        return float(self.p.max())

    def sample(self, rng: np.random.Generator) -> int:
        cumulative = np.cumsum(self.p)
        u = rng.random() * cumulative[-1]
        return int(self.ids[min(int(np.searchsorted(cumulative, u, side="right")), self.ids.shape[0] - 1)])

    def without(self, token: int) -> "Dist | None":
        """Renormalised with `token` removed (None when nothing is left)."""
        keep = self.ids != token
        if not keep.any():
            return None
        return Dist(self.ids[keep], self.p[keep] / self.p[keep].sum())

    def minus(self, q: "Dist") -> "Dist | None":
        """normalise(max(0, p − q)): the residual of speculative sampling (None when it is empty)."""
        at = np.searchsorted(q.ids, self.ids)
        at = np.minimum(at, q.ids.shape[0] - 1)
        q_here = np.where(q.ids[at] == self.ids, q.p[at], 0.0)
        residual = np.maximum(self.p - q_here, 0.0)
        total = residual.sum()
        if total <= 0:
            return None
        keep = residual > 0
        return Dist(self.ids[keep], residual[keep] / total)

    def dense(self, n: int) -> np.ndarray:
        """As a vector over a vocabulary of n."""
        out = np.zeros(n, dtype=np.float64)
        out[self.ids] = self.p
        return out


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

    def dist(self, logits: "np.ndarray | Shortlist") -> Dist:
        """The distribution after all transforms (a point mass on the argmax when greedy), from a
        full row or from its top-k shortlist.

        Top-k leaves a few dozen survivors, which are transformed in plain Python: right after a
        pass has flushed the CPU's caches, each numpy call over a handful of numbers costs more
        than the arithmetic itself."""
        if self.greedy:
            return Dist.point(argmax(logits))
        if isinstance(logits, Shortlist):
            ids, values = logits.ids, logits.logits
            if 0 < self.top_k < ids.shape[0]:
                keep = top_ids(values, self.top_k)
                ids, values = ids[keep], values[keep]
        else:
            ids = top_ids(logits, self.top_k)
            values = logits[ids]
        if ids.shape[0] > _FEW:
            ids, kept = self._many(values, ids)
            return Dist.of(ids, np.exp((kept - kept[0]) / self.temperature))
        kept = self._few(values.tolist(), ids.tolist())
        best, temperature = kept[0][0], self.temperature
        by_id = sorted((token, math.exp((logit - best) / temperature)) for logit, token in kept)
        total = sum(weight for _, weight in by_id)
        return Dist(np.array([token for token, _ in by_id], dtype=np.int64), np.array([weight / total for _, weight in by_id]))

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

    def pick(self, logits: "np.ndarray | Shortlist", rng: np.random.Generator) -> int:
        """The next token from one row of logits (or its shortlist): the argmax, or a draw."""
        return argmax(logits) if self.greedy else self.dist(logits).sample(rng)


def _negated_logit(pair: tuple[float, int]) -> float:
    return -pair[0]


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a probability vector (inverse CDF: one uniform, reproducible)."""
    cumulative = np.cumsum(probs)
    u = rng.random() * cumulative[-1]
    return int(min(np.searchsorted(cumulative, u, side="right"), len(probs) - 1))


def make_rng(seed: int | None) -> np.random.Generator:
    """A seeded generator; None draws a fresh seed."""
    return np.random.default_rng(seed)
