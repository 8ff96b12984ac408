"""Do the costs a controller was seeded with still describe this machine? Checked step by step.

Seeded costs come from a calibration, often one kept from an earlier run. If that calibration was
taken on a busy machine, or the machine has changed since (another build, another load), every
decision made from it is wrong; the steps a generation takes are timed anyway, so they are
compared with what the seeded curve predicted for their batch size. When several steps in a row
disagree the same way by more than DISAGREE, the seeded curve is off by the median ratio.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from .estimates import CostCurve

DISAGREE = 1.5  # observed over predicted seconds beyond which (or below 1 / which) a step disagrees
WINDOW = 6  # consecutive disagreeing steps that prove the seeded costs wrong


class CostDrift:
    """Compares timed steps with a seeded cost curve; `observe` returns the factor the seeded
    costs are off by once the evidence is in (None until then, and after it is taken)."""

    def __init__(self, seeded: dict[int, float]):
        self.curve = CostCurve.of(seeded)
        self.recent: deque[tuple[int, float, float]] = deque(maxlen=WINDOW)  # (batch, seconds, log ratio)
        self.factor = 1.0  # product of the corrections found so far

    def observe(self, batch: int, seconds: float) -> float | None:
        predicted = self.curve(batch)
        if predicted <= 0 or seconds <= 0:
            return None
        self.recent.append((batch, seconds, math.log(seconds / predicted)))
        if len(self.recent) < WINDOW:
            return None
        logs = [r for _, _, r in self.recent]
        bound = math.log(DISAGREE)
        if not (all(r > bound for r in logs) or all(r < -bound for r in logs)):
            return None
        factor = math.exp(statistics.median(logs))
        self.curve = CostCurve.of({size: value * factor for size, value in self.curve.points().items()})
        self.factor *= factor
        return factor

    def observations(self) -> list[tuple[int, float]]:
        """The steps behind the last correction, to be counted as measurements of their own."""
        taken = [(batch, seconds) for batch, seconds, _ in self.recent]
        self.recent.clear()
        return taken
