"""Running estimates that speculation decisions are made from: success rates by draft position, and
costs by size, gathered per drafter.

All of them forget old observations, because the text changes (prose, then a code block) and so do
the costs (the KV cache grows). None reads a clock: callers pass the measured seconds in.
"""

from __future__ import annotations

import math
from bisect import bisect_left

from ... import defaults

LEARNED_BEYOND = defaults.COST_LEARNED_BEYOND
SCALE_STEP = defaults.COST_SCALE_STEP


class PositionRates:
    """P(position i succeeds | every earlier position did), for draft positions 1..size.

    One step with cap k and s successes tried positions 1..min(k, s + 1): the first s succeeded, the
    next one (if within the cap) failed. Used for acceptance (s = tokens accepted) and for draft
    length (s = tokens drafted). Every update multiplies the old counts by `decay`, so about
    1 / (1 - decay) recent steps carry the estimate. A position with few trials leans on the pooled
    rate of all positions, which is what lets deeper positions be estimated before they are tried.
    """

    def __init__(
        self,
        size: int,
        *,
        decay: float = 0.95,
        prior: float = 0.5,
        prior_weight: float = 1.0,
        shrink_weight: float = 2.0,
    ):
        self.size = size
        self.decay = decay
        self.prior = prior
        self.prior_weight = prior_weight
        self.shrink_weight = shrink_weight
        self.successes = [0.0] * size
        self.trials = [0.0] * size

    def update(self, k: int, successes: int) -> None:
        """Record one step: cap k, and the number of leading positions that succeeded."""
        self.successes = [s * self.decay for s in self.successes]
        self.trials = [t * self.decay for t in self.trials]
        for i in range(min(k, successes + 1, self.size)):
            self.trials[i] += 1.0
            if i < successes:
                self.successes[i] += 1.0

    def state(self) -> dict:
        """The evidence, to be kept between runs."""
        return {"s": [round(x, 4) for x in self.successes], "t": [round(x, 4) for x in self.trials]}

    def restore(self, state: dict, cap: float) -> None:
        """Take up evidence kept by an earlier run (any size; extra positions are dropped), weighed
        as at most `cap` trials at position 1, so this run's own outcomes soon outweigh it."""
        successes, trials = list(state.get("s", [])), list(state.get("t", []))
        n = min(self.size, len(successes), len(trials))
        scale = min(1.0, cap / trials[0]) if n and trials[0] > 0 else 1.0
        for i in range(n):
            self.trials[i] = max(0.0, float(trials[i])) * scale
            self.successes[i] = min(max(0.0, float(successes[i])) * scale, self.trials[i])

    def forget(self, keep: float) -> None:
        """Scale the evidence down at once, for when the text has visibly changed."""
        self.successes = [s * keep for s in self.successes]
        self.trials = [t * keep for t in self.trials]

    def pooled(self) -> float:
        """The rate over all positions, pulled towards the prior when there is little evidence."""
        return (sum(self.successes) + self.prior_weight * self.prior) / (sum(self.trials) + self.prior_weight)

    def rates(self, k: int | None = None) -> list[float]:
        """Conditional success rate of positions 1..k (default: all)."""
        pooled = self.pooled()
        w = self.shrink_weight
        n = self.size if k is None else min(k, self.size)
        return [(self.successes[i] + w * pooled) / (self.trials[i] + w) for i in range(n)]

    def survival(self, k: int | None = None) -> list[float]:
        """P(positions 1..j all succeed) for j = 1..k."""
        out, p = [], 1.0
        for rate in self.rates(k):
            p *= rate
            out.append(p)
        return out


class CostCurve:
    """Seconds as a function of a size (a verify batch, a draft length), from measurements.

    Each measured size keeps a moving average; sizes in between are interpolated linearly and sizes
    beyond the range extrapolated along the nearest segment (never downwards). The measured points
    win over any global fit because real curves are not lines (CPU kernels work in tiles).
    A single measured size is extrapolated in proportion to the size, the cautious guess.
    """

    def __init__(self, *, decay: float = 0.9):
        self.decay = decay
        self.mean: dict[int, float] = {}
        self.count: dict[int, int] = {}
        self._sizes: list[int] = []

    @classmethod
    def of(cls, points: dict[int, float]) -> CostCurve:
        """A curve through fixed measurements (sizes to seconds)."""
        curve = cls()
        for size, seconds in sorted(points.items()):
            curve.add(size, seconds)
        return curve

    def add(self, size: int, seconds: float) -> None:
        """Fold in one measurement; early ones are averaged evenly, later ones with weight 1 - decay."""
        if size not in self.mean:
            self._sizes = sorted([*self.mean, size])
        n = self.count.get(size, 0) + 1
        self.count[size] = n
        rate = max(1.0 / n, 1.0 - self.decay)
        old = self.mean.get(size, seconds)
        self.mean[size] = old + rate * (seconds - old)

    def __bool__(self) -> bool:
        return bool(self.mean)

    def __call__(self, size: int) -> float:
        """Estimated seconds at `size`; the curve must hold at least one measurement."""
        if size in self.mean:
            return self.mean[size]
        xs = self._sizes
        if len(xs) == 1:
            x0, y0 = xs[0], self.mean[xs[0]]
            return y0 * size / x0 if x0 > 0 else y0
        i = bisect_left(xs, size)
        lo, hi = (0, 1) if i == 0 else (len(xs) - 2, len(xs) - 1) if i == len(xs) else (i - 1, i)
        x0, x1 = xs[lo], xs[hi]
        y0, y1 = self.mean[x0], self.mean[x1]
        slope = (y1 - y0) / (x1 - x0)
        if i == len(xs):
            return y1 + max(0.0, slope) * (size - x1)
        if i == 0:
            return max(0.0, y0 - max(0.0, slope) * (x0 - size))
        return y0 + slope * (size - x0)

    def points(self) -> dict[int, float]:
        """The measured sizes and their current averages."""
        return dict(sorted(self.mean.items()))

    def sizes(self) -> list[int]:
        return list(self._sizes)


class CalibratedCurve:
    """Seconds by size: a calibrated shape, times one level that every measured pass moves, times a
    deviation per size learned only from passes of that size. The one cost curve of the engine:
    target passes by batch size, draft passes by their rows.

    Live passes are mostly of one size (one row per sequence decoding plain), so a curve that
    learned each size apart would follow the machine at that size only: when the machine runs
    slower than at calibration (another load, weights read back from disk, a longer context) that
    size would cost its new price while larger batches kept the old one, and drafting would look
    cheaper than it is. Here every pass moves the level (the recent ratio of timed to calibrated
    seconds), and each size keeps only its own deviation from that level. The calibration counts
    as one observation of each size it measured. One pass raises the level by at most SCALE_STEP
    (a stalled pass is not the machine's speed), and passes far beyond the largest calibrated size
    (a draft model reading a whole prompt) say more about the extrapolation than about the machine
    and are left out. Beyond the largest size the shape grows at the rate of its upper half (a
    tile's dip at the very end says nothing about larger batches).

    Without a calibration, the passes measured make the shape.
    """

    def __init__(self, shape: dict[int, float] | None = None, *, decay: float = 0.9):
        self.decay = decay
        self.calibrated = bool(shape)
        self.shape = CostCurve.of(shape or {})
        self.level = 1.0
        self.observed = 1
        self.deviation = {size: 1.0 for size in self.shape.points()}
        self.count = {size: 1 for size in self.shape.points()}
        self._sizes = sorted(self.deviation)

    def __bool__(self) -> bool:
        return bool(self.shape)

    def measured(self, size: int) -> bool:
        """Whether passes of this size were calibrated or timed."""
        return size in self.count

    def sizes(self) -> list[int]:
        return list(self._sizes)

    def shaped(self, size: int) -> float:
        """The shape's seconds at `size`, extended beyond the largest measured size."""
        top = self.shape._sizes[-1]
        if size <= top:
            return self.shape(size)
        mid = max(1, top // 2)
        slope = max(0.0, (self.shape(top) - self.shape(mid)) / (top - mid)) if top > mid else self.shape(top) / top
        return self.shape(top) + slope * (size - top)

    def __call__(self, size: int) -> float:
        return self.shaped(size) * self.level * self.deviation.get(size, 1.0)

    def add(self, size: int, seconds: float) -> None:
        """Fold in one measured pass."""
        if seconds <= 0:
            return
        if not self.calibrated:
            self.shape.add(size, seconds)
            self._count(size)
            return
        if size > LEARNED_BEYOND * self.shape.sizes()[-1]:
            return
        ratio = min(seconds / max(self.shaped(size), 1e-12), self.level * SCALE_STEP)
        self.observed += 1
        self.level += max(1.0 / self.observed, 1.0 - self.decay) * (ratio - self.level)
        n = self._count(size)
        deviation = self.deviation[size]
        self.deviation[size] = deviation + max(1.0 / n, 1.0 - self.decay) * (ratio / self.level - deviation)

    def rebase(self, factor: float) -> None:
        """The calibration proved off by `factor` (see drift.py): its shape is scaled by it and
        every size starts again from the scaled shape."""
        self.shape = CostCurve.of({size: seconds * factor for size, seconds in self.shape.points().items()})
        self.level = 1.0
        self.observed = 1
        self.deviation = dict.fromkeys(self.deviation, 1.0)
        self.count = dict.fromkeys(self.count, 1)

    def _count(self, size: int) -> int:
        if size not in self.count:
            self._sizes = sorted([*self._sizes, size])
            self.deviation[size] = 1.0
            self.count[size] = 0
        self.count[size] += 1
        return self.count[size]

    def points(self) -> dict[int, float]:
        """The measured sizes at the current level."""
        return {size: self(size) for size in self._sizes}


CHANGE = 0.25  # the alternatives the change tests weigh: acceptance, or rejection, at a quarter
CHANGE_EVIDENCE = 6.0  # log-likelihood ratio that counts as a change (about 400 to 1)


class DrafterEstimates:
    """Everything known about one drafter: acceptance and draft length by position, and draft
    seconds by draft length."""

    def __init__(self, k_max: int, decay: float = 0.95, shrink: float = 4.0, cost_decay: float = 0.9):
        self.accept = PositionRates(k_max, decay=decay, shrink_weight=shrink)
        self.length = PositionRates(k_max, decay=decay, shrink_weight=shrink, prior=0.9)
        self.draft_cost = CostCurve(decay=cost_decay)
        self.steps = 0
        self.fell = 0.0  # evidence (log-likelihood ratios) that acceptance fell, or rose, lately
        self.rose = 0.0
        self.changes = 0

    def update(self, k: int, drafted: int, accepted: int, t_draft: float) -> None:
        """Fold in one step.

        The averages forget slowly, which is right while the text stays alike. Two CUSUM tests
        watch for a change of regime: outcomes far likelier under "acceptance fell to a quarter"
        (a copied block ended) or "rejection fell to a quarter" (one began) than under the estimate.
        Either drops most of the history, so K follows within a few steps instead of the dozens a
        slow average needs.
        """
        rates = self.accept.rates(k)
        fell = rose = 0.0
        for a in rates[:accepted]:
            a = min(a, 0.999)
            fell += math.log(CHANGE)
            rose += math.log((1 - CHANGE * (1 - a)) / a)
        if accepted < len(rates):
            a = min(rates[accepted], 0.999)
            fell += math.log((1 - CHANGE * a) / (1 - a))
            rose += math.log(CHANGE)
        self.fell = max(0.0, self.fell + fell)
        self.rose = max(0.0, self.rose + rose)
        if max(self.fell, self.rose) > CHANGE_EVIDENCE:
            self.accept.forget(0.02)
            self.length.forget(0.02)
            self.fell = self.rose = 0.0
            self.changes += 1
        self.accept.update(k, accepted)
        self.length.update(k, drafted)
        self.draft_cost.add(drafted, t_draft)
        self.steps += 1
