"""Who drafts, and how much, in a step shared by several requests: draft tokens go where they buy
the most accepted tokens per second of batch time.

Alone, a request's draft costs what its verification pass costs over a single-token one. In a
batch, every draft token lengthens the one pass all requests share, so the question each step is
whether a token's expected acceptance is worth its share of that pass. The allocation starts from
plain decoding (one row per request) and adds drafts one chunk at a time, each time the chunk
with the largest expected gain net of its cost at the current value of time (the plan's tokens
per second): a chunk pays when its expected accepted tokens exceed `margin` times what its extra
seconds would have produced. Chunks of several tokens are weighed whole, because a batch cost
can grow in steps (a CPU tile, a draft model's per-pass cost) that one token alone never pays for,
and so are chunks for several requests at once, because one draft-model pass serves every request
drafting at its depth. When batch cost grows in proportion to its size, no draft pays and everyone
decodes plain.

Pure functions of estimates and cost curves: no clock, no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from ..engine.auto.control import HOPE_MARGIN

DRAFT_MARGIN = 1.1  # a draft must promise 10% more than its seconds are worth: acceptance is an estimate
LOOKUP = "ngram"
MODEL = "draft"


@dataclass(frozen=True)
class Option:
    """One way a request could draft this step: a drafter, the conditional acceptance of each
    position it can fill (position j is accepted with this chance if all before it were), and,
    for a model drafter, the tokens it must read before drafting (its catch-up)."""

    drafter: str
    acceptance: Sequence[float]
    catch_up: int = 0

    @property
    def is_model(self) -> bool:
        return self.catch_up > 0


@dataclass(frozen=True)
class Candidate:
    """A request about to decode: its options, and the most draft tokens it may verify."""

    seq: int
    options: Sequence[Option]
    cap: int
    probe: Option | None = None  # verify this option's first `probe_k` tokens whatever the estimates say
    probe_k: int = 2


@dataclass(frozen=True)
class Costs:
    """Seconds of a target pass over n tokens, and of a draft-model pass over n tokens."""

    verify: Callable[[int], float]
    draft: Callable[[int], float] | None = None


@dataclass
class Allocation:
    """The plan: per request, the drafter and how many tokens (absent: plain), with the expected
    tokens and seconds of the decoding part of the step."""

    drafts: dict[int, tuple[str, int]] = field(default_factory=dict)
    tokens: float = 0.0
    seconds: float = 0.0

    def k(self, seq: int) -> int:
        return self.drafts.get(seq, ("", 0))[1]

    def drafter(self, seq: int) -> str | None:
        return self.drafts[seq][0] if seq in self.drafts else None


class _Plan:
    """The running totals the allocation updates as it adds chunks."""

    def __init__(self, candidates: Sequence[Candidate], costs: Costs, base_rows: int):
        self.costs = costs
        self.rows = base_rows + len(candidates)
        self.alloc = Allocation(tokens=float(len(candidates)))
        self.alloc.seconds = self._verify(self.rows) - self._verify(base_rows)
        self.depth_rows: dict[int, int] = {}  # draft-model rows at each depth (1: the catch-up pass)
        self._sums: dict[int, list[float]] = {}  # per option: expected tokens of its first j positions

    def _verify(self, n: int) -> float:
        return self.costs.verify(n) if n > 0 else 0.0

    def _draft(self, n: int) -> float:
        return self.costs.draft(n) if n > 0 and self.costs.draft is not None else 0.0

    def gain(self, option: Option, k0: int, j: int) -> float:
        """Expected accepted tokens that positions k0+1..k0+j of `option` add: the chances that
        each of them is reached and accepted, P(1..i all accepted), summed."""
        sums = self._sums.get(id(option))
        if sums is None:
            sums, survive = [0.0], 1.0
            for rate in option.acceptance:
                survive *= rate
                sums.append(sums[-1] + survive)
            self._sums[id(option)] = sums
        return sums[min(k0 + j, len(sums) - 1)] - sums[k0]

    def cost(self, count: int, k0: int, j: int, *, models: int = 0, catch_up: int = 0) -> float:
        """Seconds that lengthening `count` drafts from k0 to k0 + j tokens adds: their verify rows,
        and, for `models` of them drafted by the draft model (needing `catch_up` tokens read in
        all), the depths' draft passes, which every request drafting at a depth shares."""
        seconds = self._verify(self.rows + count * j) - self._verify(self.rows)
        for depth in range(k0 + 1, k0 + j + 1) if models else ():
            add = catch_up if depth == 1 else models
            rows = self.depth_rows.get(depth, 0)
            seconds += self._draft(rows + add) - self._draft(rows)
        return seconds

    def apply(self, members: Sequence[tuple[int, Option]], k0: int, j: int, gain: float, cost: float) -> None:
        for seq, option in members:
            if option.is_model:
                for depth in range(k0 + 1, k0 + j + 1):
                    self.depth_rows[depth] = self.depth_rows.get(depth, 0) + (option.catch_up if depth == 1 else 1)
            self.alloc.drafts[seq] = (option.drafter, k0 + j)
        self.rows += len(members) * j
        self.alloc.tokens += gain
        self.alloc.seconds += cost


@dataclass
class _Move:
    """Lengthen the drafts of the first r of `ranked` (gain, sequence, option) from k0 to k0 + j tokens."""

    ranked: list[tuple[float, int, Option]]
    r: int
    k0: int
    j: int
    gain: float
    cost: float


def _moves(plan: _Plan, candidates: Sequence[Candidate], max_rows: int) -> Iterator[_Move]:
    """Every chunk worth weighing: the r requests most likely to gain, among those drafting k0
    tokens with the same drafter (or not drafting yet and able to), each lengthened by j tokens.
    Several at once matter for the draft model: each of its passes is shared by every request
    drafting at that depth, a cost no single request pays for alone."""
    groups: dict[tuple[str, int], list[tuple[Candidate, Option]]] = {}
    for cand in candidates:
        current, k0 = plan.alloc.drafter(cand.seq), plan.alloc.k(cand.seq)
        for option in cand.options:
            if current is None or option.drafter == current:
                groups.setdefault((option.drafter, k0), []).append((cand, option))
    for (_, k0), group in groups.items():
        room = {c.seq: min(c.cap, len(o.acceptance)) - k0 for c, o in group}
        for j in range(1, max(room.values()) + 1):
            able = sorted(((plan.gain(o, k0, j), c.seq, o) for c, o in group if room[c.seq] >= j), key=lambda item: -item[0])
            total, catch_up, models = 0.0, 0, 0
            for r, (gain, _, option) in enumerate(able, start=1):
                if plan.rows + r * j > max_rows:
                    break
                total += gain
                if option.is_model:
                    models += 1
                    catch_up += option.catch_up
                yield _Move(able, r, k0, j, total, plan.cost(r, k0, j, models=models, catch_up=catch_up))


def allocate(candidates: Sequence[Candidate], costs: Costs, *, max_rows: int, base_rows: int = 0,
             margin: float = DRAFT_MARGIN) -> Allocation:
    """Draft tokens per request for one step (see the module docstring).

    `base_rows`: tokens already in this step's target batch (prompt chunks being read), which the
    draft rows join; `max_rows`: the most tokens the batch may hold. A request drafts with one
    drafter per step; a candidate's `probe` is granted first, whatever it costs, so estimates of a
    drafter nobody uses stay current.
    """
    plan = _Plan(candidates, costs, base_rows)
    for cand in candidates:
        if cand.probe is not None:
            j = min(cand.probe_k, cand.cap, len(cand.probe.acceptance), max_rows - plan.rows)
            if j > 0:
                probe = cand.probe
                cost = plan.cost(1, 0, j, models=int(probe.is_model), catch_up=probe.catch_up)
                plan.apply([(cand.seq, probe)], 0, j, plan.gain(probe, 0, j), cost)
    while True:
        value = plan.alloc.tokens / plan.alloc.seconds if plan.alloc.seconds > 0 else 0.0
        best, best_net = None, 1e-12
        for move in _moves(plan, candidates, max_rows):
            net = move.gain - margin * value * move.cost
            if net > best_net:
                best, best_net = move, net
        if best is None:
            return plan.alloc
        plan.apply([(seq, option) for _, seq, option in best.ranked[: best.r]], best.k0, best.j, best.gain, best.cost)


def fixed(candidates: Sequence[Candidate], mode: str, k: int, *, max_rows: int, min_confidence: float = 0.6) -> Allocation:
    """The fixed modes: every request drafts up to k tokens with the mode's drafter ("draft": the
    model; "ngram": prompt lookup, as far as its proposal goes; "hybrid": lookup when its first
    token is at least `min_confidence` likely, else the model), however full the batch is."""
    alloc = Allocation(tokens=float(len(candidates)))
    rows = len(candidates)
    for cand in candidates:
        by_name = {o.drafter: o for o in cand.options}
        lookup, model = by_name.get(LOOKUP), by_name.get(MODEL)
        if mode == "hybrid":
            confident = lookup is not None and lookup.acceptance and lookup.acceptance[0] >= min_confidence
            option = lookup if confident else model
        else:
            option = by_name.get(MODEL if mode == "draft" else LOOKUP)
        if option is None:
            continue
        n = min(k, cand.cap, max_rows - rows, len(option.acceptance))
        if n > 0:
            alloc.drafts[cand.seq] = (option.drafter, n)
            rows += n
    return alloc


def model_can_pay(costs: Costs, k_max: int, margin: float = HOPE_MARGIN) -> bool:
    """Whether the draft model could beat plain decoding by `margin` for one request even if every
    token it drafted were accepted: k tokens cost k draft passes and a pass over k + 1. Judged once,
    from the startup calibration (as auto judges it): a draft model that cannot pay alone is never
    fed prompts, which would only delay every first token."""
    if costs.draft is None:
        return False
    plain = 1.0 / max(costs.verify(1), 1e-12)
    best = max((k + 1) / max(k * costs.draft(1) + costs.verify(k + 1), 1e-12) for k in range(1, k_max + 1))
    return best >= margin * plain
