"""What the drafters that propose ahead of every step from text alone share (prompt lookup, a
request's prediction): a state per sequence that learns from its outcomes, and no cache to keep."""

from __future__ import annotations

from collections.abc import Sequence

from .protocol import Proposals, Traits


class AheadDrafter(Traits):
    """Per-sequence states (anything with `feedback(drafted, accepted)`), nothing to read ahead."""

    ahead = True

    def __init__(self):
        self.states: dict = {}

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return 0

    def read(self, items: Sequence[tuple[int, Sequence[int]]]) -> Proposals:
        """The history is indexed as proposals are asked for: nothing to read ahead."""
        return Proposals()

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        if seq in self.states:
            self.states[seq].feedback(drafted, accepted)

    def forget(self, seq: int) -> None:
        self.states.pop(seq, None)
