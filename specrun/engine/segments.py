"""What one sequence asks of a batch: the segments a context's passes are built from.

Apart from the context, so that its head passes (head_passes.py) and its callers name them without
importing the context itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segment:
    """One sequence's share of a batch: tokens appended at its end, and which rows return logits
    ("all", "last" or "none"); with "all", the first `skip` rows return none (rows no one reads:
    those predicting tokens a constraint forces), which spares their output layer."""

    seq: int
    tokens: Sequence[int]
    logits: str = "all"
    skip: int = 0


@dataclass(frozen=True)
class HeadSegment:
    """One sequence's share of a head context's batch: tokens appended at its end, each with the
    hidden row it is paired with, and whether its last entry returns logits."""

    seq: int
    tokens: Sequence[int]
    rows: Sequence[np.ndarray]
    last: bool = True
