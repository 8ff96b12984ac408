"""Distributions the verification tests write out in full, as sampling.Dist holds them."""

from __future__ import annotations

import numpy as np

from specrun.engine.sampling import Dist


def dense(probs: np.ndarray) -> Dist:
    """The distribution a full-vocabulary probability vector describes."""
    ids = np.flatnonzero(probs > 0)
    return Dist.of(ids, probs[ids])
