"""Who drafts, and how much, in one step of one or many sequences: draft tokens go where they buy
the most accepted tokens per second of batch time.

A step's target pass verifies every sequence's `[last] + draft`. Every draft token lengthens that
one pass, so the question each step is whether a token's expected acceptance is worth what its
share of the pass costs. The allocation starts from plain decoding (one row per sequence) and adds
drafts one chunk at a time, each time the chunk with the largest expected gain net of its cost at
the value of time: a chunk pays when its expected accepted tokens exceed what its extra seconds
would have produced at that value. Chunks of several tokens are weighed whole, because a batch
cost can grow in steps (a CPU tile, a draft model's per-pass cost) that one token alone never pays
for, and so are chunks for several sequences at once, because one draft-model pass serves every
sequence drafting at its depth. When batch cost grows in proportion to its size, no draft pays.

The value of time is the best of the rate achieved lately and the rate of the plan being built.
With one sequence this is the single request's choice: the option (plain, a cut of the lookup's
proposal in hand, the draft model at some K) whose expected tokens most exceed its seconds at that
value.

Pure functions of estimates and cost curves: no clock, no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from ... import defaults
from .cost_model import Costs, survival


@dataclass(frozen=True)
class Option:
    """One way a sequence could draft this step: a drafter and the conditional acceptance of each
    position it can fill (position j is accepted with this chance if all before it were)."""

    drafter: str
    acceptance: Sequence[float]


@dataclass(frozen=True)
class Candidate:
    """A sequence about to decode: its options, and the most draft tokens it may verify."""

    seq: int
    options: Sequence[Option]
    k_max: int


@dataclass(frozen=True)
class Grant:
    """A draft the plan settled before weighing: a probe or warm-up of `option`, `k` tokens."""

    seq: int
    option: Option
    k: int


@dataclass
class Allocation:
    """The plan: per sequence, the drafter and how many tokens (absent: plain), with the expected
    tokens and seconds of the decoding part of the step."""

    drafts: dict[int, tuple[str, int]] = field(default_factory=dict)
    tokens: float = 0.0
    seconds: float = 0.0

    def k(self, seq: int) -> int:
        return self.drafts.get(seq, ("", 0))[1]

    def drafter(self, seq: int) -> str | None:
        return self.drafts[seq][0] if seq in self.drafts else None

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class _Plan:
    """The running totals the allocation updates as it adds chunks."""

    def __init__(self, candidates: Sequence[Candidate], costs: Costs, base_rows: int):
        self.costs = costs
        self.rows = base_rows + len(candidates)
        self.alloc = Allocation(tokens=float(len(candidates)))
        self.alloc.seconds = self._verify(self.rows) - self._verify(base_rows)
        self.depth_rows: dict[tuple[str, int], int] = {}  # rows of each drafter's pass at each depth
        self._pass_s: dict[tuple[str, int], float] = {}  # each drafter's pass seconds by rows, read once
        self._sums: dict[int, list[float]] = {}  # per option: expected tokens of its first j positions

    def _verify(self, n: int) -> float:
        return self.costs.verify(n) if n > 0 else 0.0

    def verify_from(self, rows: int):
        """Seconds that n more rows add to a target pass over `rows`, as a function of n."""
        verify, before = self.costs.verify, self._verify(rows)
        return lambda n: verify(rows + n) - before

    def gain(self, option: Option, k0: int, j: int) -> float:
        """Expected accepted tokens that positions k0+1..k0+j of `option` add: the chances that
        each of them is reached and accepted, P(1..i all accepted), summed."""
        sums = self.sums(option)
        return sums[min(k0 + j, len(sums) - 1)] - sums[k0]

    def sums(self, option: Option) -> list[float]:
        """Expected tokens of the first j positions of `option`, for j = 0..len(acceptance)."""
        sums = self._sums.get(id(option))
        if sums is None:
            sums = [0.0]
            for reached in survival(option.acceptance):
                sums.append(sums[-1] + reached)
            self._sums[id(option)] = sums
        return sums

    def cost(self, drafter: str, count: int, k0: int, j: int) -> float:
        """Seconds that lengthening `count` drafts of `drafter` from k0 to k0 + j tokens adds: their
        verify rows and, for a drafter that runs passes, its passes at those depths, each shared
        by every sequence drafting at that depth (a block drafter's one pass, by its rows)."""
        seconds = self._verify(self.rows + count * j) - self._verify(self.rows)
        if drafter not in self.costs.draft:
            return seconds
        if drafter in self.costs.blocks:  # one pass; a new draft adds its anchor row too
            rows = self.depth_rows.get((drafter, 0), 0)
            return seconds + self._pass(drafter, rows + count * (j + (k0 == 0))) - self._pass(drafter, rows)
        for depth in range(k0 + 1, k0 + j + 1):
            rows = self.depth_rows.get((drafter, depth), 0)
            seconds += self._pass(drafter, rows + count) - self._pass(drafter, rows)
        return seconds

    def _pass(self, drafter: str, rows: int) -> float:
        """Seconds of `drafter`'s pass over `rows` rows (none: no pass)."""
        if rows <= 0:
            return 0.0
        key = (drafter, rows)
        if key not in self._pass_s:
            self._pass_s[key] = self.costs.draft[drafter](rows)
        return self._pass_s[key]

    def apply(self, members: Sequence[tuple[int, Option]], k0: int, j: int, gain: float, cost: float) -> None:
        for seq, option in members:
            if option.drafter in self.costs.blocks:
                key = (option.drafter, 0)
                self.depth_rows[key] = self.depth_rows.get(key, 0) + j + (k0 == 0)
            else:
                for depth in range(k0 + 1, k0 + j + 1):
                    key = (option.drafter, depth)
                    self.depth_rows[key] = self.depth_rows.get(key, 0) + 1
            self.alloc.drafts[seq] = (option.drafter, k0 + j)
        self.rows += len(members) * j
        self.alloc.tokens += gain
        self.alloc.seconds += cost


@dataclass
class _Move:
    """Lengthen the drafts of the first r of `ranked` (gain, sequence, option) from k0 to k0 + j
    tokens of `drafter`: `gain` expected tokens more for `cost` seconds more."""

    ranked: list[tuple[float, int, Option]]
    r: int
    k0: int
    j: int
    gain: float
    drafter: str
    cost: float


def _best_move(plan: _Plan, candidates: Sequence[Candidate], max_rows: int, worth: float) -> _Move | None:
    """Of every chunk worth weighing, the one whose expected tokens most exceed its seconds at the
    value `worth` (None: no chunk gains anything net). A chunk lengthens by j tokens the drafts of
    the r sequences most likely to gain, among those drafting k0 tokens with the same drafter (or
    not drafting yet and able to). Weighed in a fixed order, the first of equal nets wins. Its cost
    is worked out only for a chunk whose gain alone could beat the best so far: costs are never
    negative. Runs every step for every sequence, so it makes no object per chunk it weighs."""
    groups: dict[tuple[str, int], list[tuple[Candidate, Option]]] = {}
    for cand in candidates:
        current, k0 = plan.alloc.drafter(cand.seq), plan.alloc.k(cand.seq)
        for option in cand.options:
            if current is None or option.drafter == current:
                groups.setdefault((option.drafter, k0), []).append((cand, option))
    first = itemgetter(0)
    best, best_net = None, 1e-12
    rows, verify = plan.rows, plan.verify_from(plan.rows)
    for (drafter, k0), group in groups.items():
        passes = drafter in plan.costs.draft  # else a chunk costs its verify rows alone
        members = [(min(c.k_max, len(o.acceptance)) - k0, plan.sums(o), c.seq, o) for c, o in group]
        for j in range(1, max((room for room, _, _, _ in members), default=0) + 1):
            fits = (max_rows - rows) // j  # the most sequences a chunk of j tokens each has room for
            if fits <= 0:
                break
            able = [(sums[k0 + j] - sums[k0], seq, option) for room, sums, seq, option in members if room >= j]
            if len(able) > 1:
                able.sort(key=first, reverse=True)
            total = 0.0
            for r, (gain, _, _) in enumerate(able[:fits], start=1):
                total += gain
                if total <= best_net:
                    continue
                cost = plan.cost(drafter, r, k0, j) if passes else verify(r * j)
                net = total - worth * cost
                if net > best_net:
                    best, best_net = _Move(able, r, k0, j, total, drafter, cost), net
    return best


def allocate(
    candidates: Sequence[Candidate],
    costs: Costs,
    *,
    max_rows: int,
    base_rows: int = 0,
    value: float = 0.0,
    grants: Sequence[Grant] = (),
) -> Allocation:
    """Draft tokens per sequence for one step (see the module docstring).

    `base_rows`: tokens already in this step's target batch (prompt chunks being read), which the
    draft rows join; `max_rows`: the most tokens the batch may hold; `value`: tokens per second a
    second is worth at least (the rate achieved lately). A sequence drafts with one drafter per
    step. `grants` are settled first whatever they cost (probes that keep the estimates of a
    drafter nobody uses current); their sequences are not weighed further.
    """
    plan = _Plan(candidates, costs, base_rows)
    settled = set()
    for grant in grants:
        j = min(grant.k, len(grant.option.acceptance), max_rows - plan.rows)
        if j > 0:
            plan.apply(
                [(grant.seq, grant.option)],
                0,
                j,
                plan.gain(grant.option, 0, j),
                plan.cost(grant.option.drafter, 1, 0, j),
            )
            settled.add(grant.seq)
    free = [c for c in candidates if c.seq not in settled]
    while (best := _best_move(plan, free, max_rows, max(value, plan.alloc.rate))) is not None:
        plan.apply([(seq, option) for _, seq, option in best.ranked[: best.r]], best.k0, best.j, best.gain, best.cost)
    return plan.alloc


def fixed(
    candidates: Sequence[Candidate],
    drafters: Sequence[str],
    k: int,
    *,
    max_rows: int,
    min_confidence: float = defaults.HYBRID_MIN_CONFIDENCE,
) -> Allocation:
    """The fixed modes: every sequence drafts up to k tokens with the first of the mode's
    `drafters` it has an option of, however full the batch is. A drafter before the last is taken
    only when its first token is at least `min_confidence` likely (hybrid: prompt lookup when it
    has a confident match, else the draft model); the last is taken as far as its option goes."""
    alloc = Allocation(tokens=float(len(candidates)))
    rows = len(candidates)
    last = len(drafters) - 1
    for cand in candidates:
        by_name = {o.drafter: o for o in cand.options}
        option = next(
            (
                by_name[name]
                for i, name in enumerate(drafters)
                if name in by_name
                and (i == last or (by_name[name].acceptance and by_name[name].acceptance[0] >= min_confidence))
            ),
            None,
        )
        if option is None:
            continue
        n = min(k, cand.k_max, max_rows - rows, len(option.acceptance))
        if n > 0:
            alloc.drafts[cand.seq] = (option.drafter, n)
            rows += n
    return alloc
