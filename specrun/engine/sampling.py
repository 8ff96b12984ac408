"""Logits → next-token probabilities with llama.cpp's transform order, and a seeded RNG.

Target (p) and draft (q) rows go through the same `SamplingParams.probs`, as speculative sampling
requires. Order follows llama.cpp's default chain: top-k, top-p, min-p on the untempered
distribution, then temperature over the survivors. Temperature 0 means greedy: a point mass on the
argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import defaults


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

    def candidates(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Surviving token ids and their (untempered) logits, highest first."""
        n = logits.shape[0]
        if 0 < self.top_k < n:
            ids = np.argpartition(logits, -self.top_k)[-self.top_k :]
        else:
            ids = np.arange(n)
        ids = ids[np.argsort(-logits[ids], kind="stable")]
        kept = logits[ids].astype(np.float64)
        if self.top_p < 1.0 or self.min_p > 0.0:
            weights = np.exp(kept - kept[0])
            if self.top_p < 1.0:
                cumulative = np.cumsum(weights / weights.sum())
                cut = int(np.searchsorted(cumulative, self.top_p)) + 1
                ids, kept, weights = ids[:cut], kept[:cut], weights[:cut]
            if self.min_p > 0.0:
                keep = weights >= self.min_p  # weights are p / p_max
                ids, kept = ids[keep], kept[keep]
        return ids, kept

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """Full-vocabulary probabilities after all transforms (a point mass when greedy)."""
        out = np.zeros(logits.shape[0], dtype=np.float64)
        if self.greedy:
            out[int(np.argmax(logits))] = 1.0
            return out
        ids, kept = self.candidates(logits)
        scaled = (kept - kept[0]) / self.temperature
        weights = np.exp(scaled)
        out[ids] = weights / weights.sum()
        return out


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a probability vector (inverse CDF: one uniform, reproducible)."""
    cumulative = np.cumsum(probs)
    u = rng.random() * cumulative[-1]
    return int(min(np.searchsorted(cumulative, u, side="right"), len(probs) - 1))


def make_rng(seed: int | None) -> np.random.Generator:
    """A seeded generator; None draws a fresh seed."""
    return np.random.default_rng(seed)
