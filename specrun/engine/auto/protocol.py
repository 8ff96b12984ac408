"""What the engine and the auto controller exchange each step: an Ask per decoding sequence goes
in, a Decision of a Choice per sequence comes out, and an Outcome per sequence comes back once the
step ran. Kept apart from the controller so that its parts (estimation, exploration) and the engine
share these types without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .estimates import PositionRates


@dataclass(frozen=True)
class Choice:
    """What one sequence runs next: a drafter (None: plain decoding) and K, the most tokens it may draft."""

    drafter: str | None
    k: int
    reason: str = "best"  # "warmup" (measuring), "probe" (re-checking a drafter) or "best"

    def label(self) -> str:
        return "plain" if self.drafter is None or self.k <= 0 else f"{self.drafter} K={self.k}"


PLAIN = Choice(None, 0)


@dataclass(frozen=True)
class Ask:
    """One decoding sequence as the controller sees it: its seq id, the most draft tokens it may
    verify, the tokens it is expected to produce still (never more than it may), its own
    acceptance evidence per drafter, the proposals already in hand (drafter → per-token
    confidences), and the seconds a drafter must spend before it can draft for it (a draft cache
    behind its history)."""

    seq: int
    k_max: int
    remaining: int | None = None
    own: Mapping[str, PositionRates] = field(default_factory=dict)
    in_hand: Mapping[str, Sequence[float]] = field(default_factory=dict)
    catch_up_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What one sequence's part of a step did: its choice, the draft's length and accepted prefix,
    and the seconds its drafter spent on it."""

    choice: Choice
    drafted: int
    accepted: int
    draft_s: float = 0.0


@dataclass
class Decision:
    """The plan of one step: a choice per sequence."""

    choices: dict[int, Choice] = field(default_factory=dict)

    def choice(self, seq: int) -> Choice:
        return self.choices.get(seq, PLAIN)
