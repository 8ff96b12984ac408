"""What every drafter offers the loop: a proposal for a history, and what to learn from its fate.

A drafter is a function of the token history: it gets the whole history each step and keeps its own
state (the draft model reuses the longest cached prefix), so the loop never has to tell it what was
rejected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np


@dataclass
class Draft:
    """A proposal: tokens, and the q rows they were sampled from (None: a deterministic proposal)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[np.ndarray] | None = None
    confidence: list[float] | None = None


class Drafter(Protocol):
    """Anything that proposes up to k tokens for a history and learns how many were accepted."""

    name: str

    def propose(self, history: Sequence[int], k: int) -> Draft:
        """Up to k tokens to follow `history` (fewer, or none, when it has nothing worth verifying)."""

    def feedback(self, drafted: int, accepted: int) -> None:
        """How many of the last proposal's tokens the target accepted."""

    def prefill(self, prompt: Sequence[int]) -> None:
        """Read the prompt ahead of the first proposal (a drafter without a cache does nothing)."""

    @property
    def source(self) -> Drafter:
        """The drafter behind the last proposal: itself, or the part of a combination that drafted."""


