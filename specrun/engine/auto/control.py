"""The `--spec auto` decision, for one sequence or many: before each step, pick each sequence's
drafter and K (plain decoding, K = 0, included) so that speculation is used only where it pays.

The controller is pure bookkeeping: the engine asks `plan()` with every decoding sequence's
options, runs the step, and reports what it measured with `observe()`. It never reads a clock or
touches a model, which keeps every decision reproducible in tests. The decision itself is
plan.allocate; what is here is what it is fed (estimates, costs, the value of time) and the
exploration around it (warm-up, probes, change tests, cost drift).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field

from ... import defaults
from .cost_model import Costs
from .drift import CostDrift
from .estimates import CalibratedCurve, DrafterEstimates, PositionRates
from .plan import Allocation, Candidate, Grant, Option, allocate

HOPE_MARGIN = defaults.HOPE_MARGIN
WEIGH_AGAIN = 8  # steps a loser's verdict stands while it is not used (its use judges it again at once)
ESTABLISHED_SHARE = 0.5  # a drafter drafting for this share of recent sequence-steps has shown it pays
USE_DECAY = 0.98  # per step, for that share: about the last fifty steps
EXPLORE_ODDS = 0.5  # the chance an untried drafter turns out as good as it could be, when weighing a try
VALUE_ROUNDS = 3  # plans made to find the value of time a step can reach (see _allocate)
LEARNED_WEIGHT = 8.0  # trials an earlier run's acceptance counts for: a prior, not a verdict
OWN_EVIDENCE = 4.0  # trials at which a sequence's own acceptance counts as much as the pooled estimate
REACH_FLOOR = 1e-3  # a draft position reached less often than this adds nothing worth weighing


def reachable(acceptance: list[float]) -> list[float]:
    """The positions of an estimate a draft reaches at least REACH_FLOOR of the time (the first
    always): the plan weighs every K of every option, so positions that can add nothing are not
    offered at all."""
    survive = 1.0
    for j, rate in enumerate(acceptance):
        survive *= rate
        if survive < REACH_FLOOR:
            return acceptance[: j + 1]
    return acceptance


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
    verify, the tokens it may still produce, its own acceptance evidence per drafter, the proposals
    already in hand (drafter → per-token confidences), and the seconds a drafter must spend before
    it can draft for it (a draft cache behind its history)."""

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


class Controller:
    """Chooses drafter and K per sequence and step from live estimates.

    Estimates: per drafter, acceptance and draft length by position (decaying per step that drafter
    runs, pooled over every sequence), each sequence's own acceptance beside them, seconds of a
    drafter's pass by its rows, and target pass seconds by batch size. A sequence's option is its
    drafter with the pooled acceptance leaned on by its own (OWN_EVIDENCE trials weigh as much as
    the pool), or, for a drafter whose proposal is in hand (prompt lookup), that proposal's own
    confidences; plan.allocate weighs them all at once.

    Exploration: one plain step and `warmup_steps` steps of each drafter at `k_start` first; later
    each drafter that is not used is probed with K = `probe_k` every `probe_every` steps. A probe
    that fails doubles that interval (up to `probe_every_max`); one that surprises (all accepted
    where the estimate expected otherwise) is followed by another at once, and so is an empty probe
    of a cheap drafter while plain decoding is best, since it cost a plain step. Positions deeper
    than any tried borrow the drafter's pooled rate, so K grows while acceptance holds up, and a
    sudden change of acceptance drops the drafter's history (see DrafterEstimates), so K follows
    within a few steps. A drafter whose ceiling (its rate at full acceptance) cannot beat plain
    decoding by HOPE_MARGIN is neither warmed up nor probed. With `explore_share` (a server sets
    it), the tries of a drafter that runs passes, and the catch-ups of one not yet drafting for
    ESTABLISHED_SHARE of the sequences, together cost at most that share of the seconds stepped.

    A drafter that proposes before every step (prompt lookup: its proposal is in the Ask's
    `in_hand`) is judged on that proposal, not on its averages, and never warmed up or probed.
    """

    def __init__(
        self,
        drafter_names: Sequence[str],
        k_max: int,
        *,
        k_start: int = defaults.DRAFT_MAX,
        warmup_steps: int = 3,
        probe_k: int = 2,
        probe_every: int = defaults.PROBE_EVERY,
        probe_every_max: int = defaults.PROBE_EVERY_MAX,
        acceptance_decay: float = 0.95,
        position_shrink: float = 4.0,
        cost_decay: float = 0.9,
        rate_decay: float = 0.98,
        drafter_k_max: Mapping[str, int] | None = None,
        explore_share: float | None = None,
    ):
        if k_max < 1:
            raise ValueError("k_max must be at least 1")
        self.k_max = k_max
        self.drafter_k_max = dict(drafter_k_max or {})  # drafters that draft fewer tokens a step (chained MTP heads)
        self.k_start = max(1, min(k_start, k_max))
        self.warmup_steps = warmup_steps
        self.probe_k = max(1, min(probe_k, k_max))
        self.probe_base = probe_every
        self.probe_every_max = probe_every_max
        self.acceptance_decay = acceptance_decay
        self.position_shrink = position_shrink
        self.cost_decay = cost_decay
        self.rate_decay = rate_decay
        self.verify = CalibratedCurve(decay=cost_decay)
        self.passes: dict[str, CalibratedCurve] = {}  # per drafter that runs passes: seconds by rows
        self.blocks: frozenset[str] = frozenset()  # those of them that draft a whole block per pass
        self.ruled_out: set[str] = set()  # drafters the seeded costs showed cannot pay
        self.tracks: dict[str, DrafterEstimates] = {}
        self.probe_every: dict[str, int] = {}  # per drafter: steps between probes while it is not used
        self.next_probe: dict[str, int] = {}
        self._profiles: dict[str, list[tuple[float, float]] | None] = {}  # until the next observation
        self._costs: Costs | None = None  # likewise
        self._step_s: dict[str, list[float]] = {}  # likewise
        self._ceilings: dict[str, float | None] = {}  # likewise
        # Per drafter: whether `weighs` found it worth weighing, its steps then, and the step it was
        # judged: costs drift slowly, and its profile is its own pass over every K.
        self._weighed: dict[str, tuple[int, int, bool]] = {}
        for name in drafter_names:
            self._track(name)
        self.steps = 0
        self.choices: Counter[tuple[str | None, int]] = Counter()
        self.reasons: Counter[str] = Counter()
        self._current: Choice | None = None  # the last choice made as the best, for the label
        self._recent_tokens = 0.0  # decayed tokens and seconds of recent steps: the achieved rate
        self._recent_seconds = 0.0
        self.drift: CostDrift | None = None  # are the seeded costs this machine's? (see drift.py)
        # Exploration's budget, when it has one: tries of drafters that run passes (warm-ups,
        # probes) may cost at most this share of the seconds stepped so far (see `affords`).
        self.explore_share = explore_share
        self.busy_s = 0.0
        self.explore_s = 0.0
        self._chosen: dict[str, float] = {}  # decayed count of sequence-steps each drafter drafted as the best choice
        self._decoded = 0.0  # and of all sequence-steps

    def seed(
        self,
        verify_s: dict[int, float],
        draft_pass_s: dict[str, dict[int, float] | float] | None = None,
        *,
        blocks: Set[str] = frozenset(),
    ) -> None:
        """Start from measured costs: target pass seconds by batch size, and per drafter that runs
        passes, its pass seconds by rows (a number: seconds of a one-row pass). Decisions can then
        weigh each option from the first step, and a drafter that cannot win even at full
        acceptance is never warmed up."""
        self.verify = CalibratedCurve(verify_s, decay=self.cost_decay)
        self.blocks = frozenset(blocks)
        for name, passes in (draft_pass_s or {}).items():
            self._track(name)
            self.passes[name] = CalibratedCurve(
                passes if isinstance(passes, dict) else {1: passes}, decay=self.cost_decay
            )
        self.drift = CostDrift(verify_s) if verify_s else None
        self._forget_derived()
        # Judged once, from one consistent calibration: later plain steps run at longer contexts
        # than the calibration's larger batches and would make the comparison drift.
        self.ruled_out = {name for name in self.passes if self.hopeless(name)}

    def _correct_costs(self, factor: float) -> None:
        """The seeded costs proved off by `factor`: every seeded cost is scaled by it (a drafter's
        passes too, where that drafter has not run yet), and the steps that proved it count as
        measurements. The hopeless verdicts are taken again from the corrected costs."""
        self.verify.rebase(factor)
        for size, seconds in self.drift.observations():
            self.verify.add(size, seconds)
        for name, curve in self.passes.items():
            if self.tracks[name].steps == 0 and curve.calibrated:
                curve.rebase(factor)
        self._forget_derived()
        self.ruled_out = {name for name in self.passes if self.tracks[name].steps == 0 and self.hopeless(name)}

    def _forget_derived(self) -> None:
        """Costs or estimates changed: what was computed from them is computed again when asked.
        A step weighs every K of every drafter, so it reads the curves once per observation."""
        self._profiles.clear()
        self._step_s.clear()
        self._ceilings.clear()
        self._costs = None

    def horizon(self, drafter: str) -> int:
        """The most tokens `drafter` ever drafts a step: k_max, or its own cap (a DFlash block, a
        chain of MTP heads), beyond which its costs and rates are never read."""
        return min(self.k_max, self.drafter_k_max.get(drafter, self.k_max))

    def _step_costs(self, drafter: str) -> list[float]:
        """Seconds of one sequence's step drafting m tokens with `drafter`, for m = 0..horizon (read
        once per observation: the ceiling, hopelessness and exploration's worth all ask)."""
        if drafter not in self._step_s:
            costs = self.costs()
            self._step_s[drafter] = [costs.step_seconds(m, drafter) for m in range(self.horizon(drafter) + 1)]
        return self._step_s[drafter]

    def _track(self, name: str) -> DrafterEstimates:
        if name not in self.tracks:
            self.tracks[name] = DrafterEstimates(
                self.k_max, self.acceptance_decay, self.position_shrink, self.cost_decay
            )
            self.probe_every[name] = self.probe_base
            self.next_probe[name] = 0
        return self.tracks[name]

    def own_rates(self) -> PositionRates:
        """A sequence's own acceptance evidence for one drafter, kept by the sequence."""
        return PositionRates(self.k_max, decay=self.acceptance_decay)

    # -- estimates ---------------------------------------------------------------------------

    def costs(self) -> Costs:
        """The cost curves as they stand until the next observation: target passes, the passes of
        drafters that were timed, and what untimed drafts cost by their length."""
        if self._costs is None:
            timed = {name: curve for name, curve in self.passes.items() if curve}
            drafting = {name: t.draft_cost for name, t in self.tracks.items() if name not in timed and t.draft_cost}
            self._costs = Costs(self.verify, timed, drafting, self.blocks & timed.keys()).remembered()
        return self._costs

    def draft_seconds(self, drafter: str, m: int) -> float:
        """Seconds to draft m tokens for one sequence: m one-row passes, or what its drafts cost."""
        return self.costs().draft_seconds(drafter, m)

    def _known(self, drafter: str) -> bool:
        """Whether what a draft of `drafter` costs is known (timed, or calibrated)."""
        return bool(self.passes.get(drafter)) or bool(self.tracks[drafter].draft_cost)

    def plain_rate(self) -> float | None:
        """Expected tokens per second of plain decoding, once a verify time is known."""
        return 1.0 / max(self.verify(1), 1e-12) if self.verify else None

    def profile(self, drafter: str) -> list[tuple[float, float]] | None:
        """(expected tokens, expected seconds) of one sequence's step with `drafter` for K = 1..horizon;
        None until its costs are known. Draft length m under cap K has P(m ≥ j) = Π_{i≤j} l_i, and
        the step costs draft(m) + verify(m + 1)."""
        if drafter not in self._profiles:
            self._profiles[drafter] = self._profile(drafter)
        return self._profiles[drafter]

    def _profile(self, drafter: str) -> list[tuple[float, float]] | None:
        track = self.tracks.get(drafter)
        if track is None or not self._known(drafter) or not self.verify:
            return None
        accept = track.accept.survival()
        reach = [1.0] + track.length.survival()
        cost = self._step_costs(drafter)
        out, tokens, shorter = [], 1.0, 0.0
        for k in range(1, self.horizon(drafter) + 1):
            tokens += accept[k - 1]
            shorter += (reach[k - 1] - reach[k]) * cost[k - 1]
            out.append((tokens, max(shorter + reach[k] * cost[k], 1e-12)))
        return out

    def rates(self, drafter: str) -> list[float] | None:
        """Expected tokens per second of `drafter` for K = 1..horizon (None until its costs are known)."""
        profile = self.profile(drafter)
        return None if profile is None else [tokens / seconds for tokens, seconds in profile]

    def best_rate(self, drafter: str) -> float | None:
        rates = self.rates(drafter)
        return max(rates) if rates else None

    def achieved_rate(self) -> float | None:
        """Tokens per second over recent steps, whatever ran."""
        return self._recent_tokens / self._recent_seconds if self._recent_seconds > 0 else None

    def ceiling(self, drafter: str) -> float | None:
        """Tokens per second of `drafter` if every token it drafted were accepted (None: costs not
        measured yet). Below plain decoding's rate, no acceptance rate can make it pay."""
        if drafter not in self._ceilings:
            self._ceilings[drafter] = self._ceiling(drafter)
        return self._ceilings[drafter]

    def _ceiling(self, drafter: str) -> float | None:
        if drafter not in self.tracks or not self._known(drafter) or not self.verify:
            return None
        cost = self._step_costs(drafter)
        return max((k + 1) / max(cost[k], 1e-12) for k in range(1, len(cost)))

    def hopeless(self, drafter: str) -> bool:
        """Measured costs say the drafter cannot beat plain decoding by HOPE_MARGIN even if every
        token it drafted were accepted, so measuring its acceptance is wasted time (and, for a
        draft model, each try costs a catch-up pass over the text it missed)."""
        if drafter in self.ruled_out:
            return True
        ceiling, plain = self.ceiling(drafter), self.plain_rate()
        return ceiling is not None and plain is not None and ceiling < HOPE_MARGIN * plain

    def worth_exploring(
        self, drafter: str, steps: int = 1, remaining: int | None = None, catch_up_s: float = 0.0
    ) -> bool:
        """Whether trying `drafter` for `steps` steps can repay itself within the tokens left: a try
        costs its step over a plain one (and any catch-up its cache needs first); it pays back only
        if the drafter turns out good (EXPLORE_ODDS), by at most the time its ceiling saves per
        token over the remaining tokens. Unknown costs or budget: worth it."""
        ceiling, plain = self.ceiling(drafter), self.plain_rate()
        if remaining is None or ceiling is None or plain is None:
            return True
        saving = EXPLORE_ODDS * remaining * (1.0 / plain - 1.0 / ceiling)
        return saving > self.try_seconds(drafter, steps, catch_up_s)

    def try_seconds(self, drafter: str, steps: int = 1, catch_up_s: float = 0.0) -> float:
        """What trying `drafter` for `steps` steps costs over plain ones: its steps' extra seconds
        at the K a try uses, and the catch-up its cache needs first (costs unknown: the catch-up)."""
        if drafter not in self.tracks or not self._known(drafter) or not self.verify:
            return catch_up_s
        k = self.probe_k if self.tracks[drafter].steps >= self.warmup_steps else self.k_start
        costs = self.costs()
        return max(0.0, steps * (costs.step_seconds(k, drafter) - costs.plain_s)) + catch_up_s

    def affords(self, drafter: str, seconds: float) -> bool:
        """Whether exploration's budget has room for `seconds` more spent on `drafter`. Without a
        budget, or for a drafter that runs no passes (its proposals cost next to nothing), always.
        A server sets one: a try of a head or a draft model first reads the sequence's whole
        history, and in a server of short bursts those catch-ups cost more than the drafter could
        win back."""
        if self.explore_share is None or drafter not in self.passes:
            return True
        return self.explore_s + seconds <= self.explore_share * self.busy_s

    def _charge(self, drafter: str, seconds: float) -> None:
        """Take `seconds` spent on `drafter` from the budget `affords` consults."""
        if self.explore_share is not None and drafter in self.passes:
            self.explore_s += seconds

    def catch_up_seconds(self, drafter: str, behind: int) -> float:
        """Seconds `drafter` needs to read `behind` tokens it missed before it can draft (its
        first pass reads at least one token, which its draft's own cost counts)."""
        curve = self.passes.get(drafter)
        return curve(behind) if curve and behind > 1 else 0.0

    def _repays_catch_up(self, drafter: str, ask: Ask) -> bool:
        """A drafter whose cache must first catch up (the draft model after plain steps) is worth
        switching to only if its gain over the tokens left pays for that."""
        catch_up = ask.catch_up_s.get(drafter, 0.0)
        if not catch_up or ask.remaining is None:
            return True  # decided before the drafter's rates, which cost a profile every step
        plain, rate = self.plain_rate(), self.best_rate(drafter)
        if not plain or not rate:
            return True
        return ask.remaining * (1.0 / plain - 1.0 / rate) > catch_up

    def acceptance(self, drafter: str, own: PositionRates | None, cap: int) -> list[float]:
        """A sequence's expected acceptance by position with `drafter`, up to `cap`: the pooled
        estimate, leaned on by the sequence's own evidence as it gathers."""
        pooled = self.tracks[drafter].accept.rates(cap)
        if own is None:
            return pooled
        return [
            (own.successes[i] + OWN_EVIDENCE * pooled[i]) / (own.trials[i] + OWN_EVIDENCE)
            for i in range(min(cap, own.size))
        ]

    # -- the per-step protocol ---------------------------------------------------------------

    def time_value(self) -> float:
        """Tokens a second is worth at least before a step is planned: plain decoding's rate."""
        return self.plain_rate() or 0.0

    def _allocate(
        self, asks: Sequence[Ask], max_rows: int, base_rows: int = 0, grants: Sequence[Grant] = ()
    ) -> Allocation:
        """The allocation of the highest expected rate. A draft is taken when its expected tokens
        exceed its seconds at the value of time; at the best rate the step can reach, that picks
        the allocation reaching it (the fractional-programming fixed point), so the value starts at
        plain decoding's rate and is raised to each plan's rate until that stops growing. Not the
        rate achieved lately: a copy whose drafts were all accepted ran above what its next
        proposal is expected to do, and that rate as the hurdle made the step decode plain,
        slower still."""
        candidates = [Candidate(ask.seq, self._options(ask), ask.k_max) for ask in asks]
        return self.allocation(candidates, max_rows=max_rows, base_rows=base_rows, grants=grants)

    def allocation(
        self, candidates: Sequence[Candidate], *, max_rows: int, base_rows: int = 0, grants: Sequence[Grant] = ()
    ) -> Allocation:
        """plan.allocate at the value of time the step can reach (see _allocate)."""
        costs, value = self.costs(), self.time_value()
        best = None
        for _ in range(VALUE_ROUNDS):
            alloc = allocate(candidates, costs, max_rows=max_rows, base_rows=base_rows, value=value, grants=grants)
            if best is not None and alloc.rate <= best.rate * (1 + 1e-6):
                break
            best = alloc
            if not alloc.drafts or alloc.rate <= value * (1 + 1e-6):
                break
            value = alloc.rate
        return best

    def plan(self, asks: Sequence[Ask], *, max_rows: int, base_rows: int = 0) -> Decision:
        """The choices of one step: warm-ups and probes where due, and plan.allocate for the rest."""
        decision = Decision()
        if not asks:
            return decision
        if not self.verify.measured(1):
            for ask in asks:
                decision.choices[ask.seq] = Choice(None, 0, "warmup")
            return self._record(decision)
        grants = self._warmups(asks)
        alloc = self._allocate(asks, max_rows, base_rows, [g for g, _ in grants])
        reasons = {g.seq: reason for g, reason in grants}
        for ask in asks:
            drafter, k = alloc.drafter(ask.seq), alloc.k(ask.seq)
            decision.choices[ask.seq] = Choice(drafter, k, reasons.get(ask.seq, "best")) if drafter and k else PLAIN
            if drafter and k and ask.seq not in reasons and not self.established(drafter):
                self._charge(drafter, ask.catch_up_s.get(drafter, 0.0))
        self._probe(asks, decision, alloc, max_rows - base_rows)
        return self._record(decision)

    def established(self, drafter: str) -> bool:
        """Whether `drafter` drafts for at least ESTABLISHED_SHARE of the sequences decoded lately:
        its catch-ups are then the price of a drafter that pays, not a bet on one that might."""
        chosen = self._chosen.get(drafter, 0.0)
        return chosen > 0 and chosen >= ESTABLISHED_SHARE * self._decoded

    def _affords_catch_up(self, ask: Ask, drafter: str) -> bool:
        """Under an exploration budget, a drafter not yet established may switch a sequence whose
        cache for it lags only while the budget has room for the catch-up: the plan weighs one
        step, and a catch-up it judged worth it on one sequence's rates does not always pay in a
        batch, where draft rows cost more."""
        catch_up = ask.catch_up_s.get(drafter, 0.0)
        return not catch_up or self.established(drafter) or self.affords(drafter, catch_up)

    def _cap(self, name: str, ask: Ask) -> int:
        """The most tokens `name` may draft for `ask` this step."""
        return min(ask.k_max, self.horizon(name))

    def weighs(self, drafter: str) -> bool:
        """Whether plan() weighs `drafter` at all; for one it does not, nothing it would need (its
        catch-up, its profile) is worth working out: one the seeded costs ruled out, and one that
        runs passes, was tried, loses to plain decoding at its best K and is not due a probe (its
        probes, warm-ups and a change of its estimates bring it back)."""
        if drafter in self.ruled_out:
            return False
        if drafter not in self.passes or self.tracks[drafter].steps < self.warmup_steps:
            return True
        if self.steps >= self.next_probe.get(drafter, 0):
            return True
        tried = self.tracks[drafter].steps
        kept = self._weighed.get(drafter)
        if kept is not None and kept[0] == tried and self.steps - kept[1] < WEIGH_AGAIN:
            return kept[2]
        best, plain = self.best_rate(drafter), self.plain_rate()
        verdict = best is None or plain is None or best >= plain
        self._weighed[drafter] = (tried, self.steps, verdict)
        return verdict

    def _options(self, ask: Ask) -> list[Option]:
        """The ways `ask` could draft this step: a proposal in hand, or a drafter judged on its
        estimates. A drafter the seeded costs ruled out is never tried, so it is not weighed
        either (its profile and moves would cost host time every step)."""
        options = []
        for name in self.tracks:
            if not self.weighs(name):
                continue
            if name in ask.in_hand:
                if ask.in_hand[name]:
                    options.append(Option(name, list(ask.in_hand[name])))
            elif self._known(name) and self._affords_catch_up(ask, name) and self._repays_catch_up(name, ask):
                options.append(Option(name, reachable(self.acceptance(name, ask.own.get(name), self._cap(name, ask)))))
        return options

    def _warmups(self, asks: Sequence[Ask]) -> list[tuple[Grant, str]]:
        """Drafters still being measured, each granted to one sequence that can use it."""
        grants, taken = [], set()
        for name, track in self.tracks.items():
            for ask in self._least_behind(asks, name):
                if ask.seq in taken or ask.k_max <= 0:
                    continue
                if name in ask.in_hand:
                    confidence = ask.in_hand[name]
                    if confidence and len(self.verify.sizes()) < 2:
                        # Only single-token passes measured: verify costs for a batch are a guess
                        # that would veto every lookup draft, so take this proposal once to measure them.
                        grants.append(
                            (
                                Grant(
                                    ask.seq, Option(name, list(confidence)), min(len(confidence), self.k_max, ask.k_max)
                                ),
                                "warmup",
                            )
                        )
                        taken.add(ask.seq)
                        break
                    continue
                catch_up = ask.catch_up_s.get(name, 0.0)
                if (  # the budget first: under a server's, it refuses most steps and costs least to ask
                    track.steps < self.warmup_steps
                    and self.affords(name, tried := self.try_seconds(name, 1, catch_up))
                    and not self.hopeless(name)
                    and self.worth_exploring(name, self.warmup_steps - track.steps, ask.remaining, catch_up)
                ):
                    self._charge(name, tried)
                    option = Option(name, self.acceptance(name, ask.own.get(name), self._cap(name, ask)))
                    grants.append((Grant(ask.seq, option, min(self.k_start, self._cap(name, ask))), "warmup"))
                    taken.add(ask.seq)
                break
        return grants

    @staticmethod
    def _least_behind(asks: Sequence[Ask], name: str) -> list[Ask]:
        """The asks in the order a warm-up or probe of `name` tries them: those whose cache for it
        has least to catch up first (a head's or draft model's first use reads a whole history)."""
        return sorted(asks, key=lambda ask: ask.catch_up_s.get(name, 0.0))

    def _probe(self, asks: Sequence[Ask], decision: Decision, alloc: Allocation, max_rows: int) -> None:
        """A due probe of each drafter nobody uses, given to one sequence that is not drafting with
        a proposal in hand; every drafter in use has its probe interval reset."""
        used = {choice.drafter for choice in decision.choices.values() if choice.drafter}
        for name in used:
            self.probe_every[name] = self.probe_base
        rows = len(asks) + sum(c.k for c in decision.choices.values())
        for name, due in self.next_probe.items():
            if name in used or self.steps < due or self.hopeless(name):
                continue
            for ask in self._least_behind(asks, name):
                current = decision.choice(ask.seq)
                if (
                    name in ask.in_hand
                    or (current.drafter is not None and current.drafter in ask.in_hand)
                    or current.reason != "best"
                ):
                    continue
                k = min(self.probe_k, self._cap(name, ask))
                catch_up = ask.catch_up_s.get(name, 0.0)
                if not self.affords(name, tried := self.try_seconds(name, 1, catch_up)):
                    break  # the asks behind it have as much to catch up or more
                if k <= 0 or rows - current.k + k > max_rows:
                    continue
                if not self.worth_exploring(name, 1, ask.remaining, catch_up):
                    continue
                self._charge(name, tried)
                decision.choices[ask.seq] = Choice(name, k, "probe")
                rows += k - current.k
                break

    def _record(self, decision: Decision) -> Decision:
        for name in self._chosen:
            self._chosen[name] *= USE_DECAY
        self._decoded = USE_DECAY * self._decoded + len(decision.choices)
        for choice in decision.choices.values():
            self.choices[(choice.drafter, choice.k)] += 1
            self.reasons[choice.reason] += 1
            if choice.drafter is not None and choice.reason == "best":
                self._chosen[choice.drafter] = self._chosen.get(choice.drafter, 0.0) + 1
            if choice.reason != "probe":
                self._current = choice
        return decision

    def observe(
        self,
        outcomes: Sequence[Outcome],
        *,
        rows: int | None,
        verify_s: float,
        draft_s: float = 0.0,
        passes: Mapping[str, Sequence[tuple[int, float]]] | None = None,
    ) -> None:
        """Fold in one step: each sequence's outcome, the target pass (its rows, or None when prompt
        rows shared it and it says nothing of decoding's cost), the seconds drafting took in all,
        and each drafter's passes (rows, seconds)."""
        self.steps += 1
        self._forget_derived()
        if rows is not None:
            self.verify.add(rows, verify_s)
            if self.drift is not None:
                factor = self.drift.observe(rows, verify_s)
                if factor is not None:
                    self._correct_costs(factor)
        for name, timed in (passes or {}).items():
            curve = self.passes.setdefault(name, CalibratedCurve(decay=self.cost_decay))
            for n, seconds in timed:
                curve.add(n, seconds)
        self._recent_tokens = self.rate_decay * self._recent_tokens + sum(o.accepted + 1 for o in outcomes)
        self._recent_seconds = self.rate_decay * self._recent_seconds + draft_s + verify_s
        self.busy_s += draft_s + verify_s
        plain_is_best = self._current is None or self._current.drafter is None
        for outcome in outcomes:
            choice = outcome.choice
            if choice.drafter is None or choice.k <= 0:
                continue
            self._observe_drafter(choice, outcome, plain_is_best, verify_s)

    def _observe_drafter(self, choice: Choice, outcome: Outcome, plain_is_best: bool, verify_s: float) -> None:
        name = choice.drafter
        track = self._track(name)
        probing = choice.reason == "probe"
        drafted, accepted = outcome.drafted, outcome.accepted
        surprise = probing and drafted > 0 and accepted == drafted and track.accept.survival(drafted)[-1] < 0.5
        track.update(choice.k, drafted, accepted, outcome.draft_s)
        if probing:
            free = plain_is_best and drafted == 0 and outcome.draft_s <= 0.05 * self.verify(1)
            if surprise or free:
                self.next_probe[name] = self.steps
                return
            self.probe_every[name] = min(2 * self.probe_every[name], self.probe_every_max)
        self.next_probe[name] = self.steps + self.probe_every[name]

    # -- reporting ---------------------------------------------------------------------------

    def learned(self) -> dict:
        """Acceptance and draft length by position per drafter, to be kept between runs."""
        return {name: {"accept": t.accept.state(), "length": t.length.state()} for name, t in self.tracks.items()}

    def learn(self, learned: dict) -> None:
        """Start from what an earlier run learned, weighed as LEARNED_WEIGHT trials: a fresh process
        then judges drafters by evidence instead of probing them from nothing."""
        for name, state in learned.items():
            if name in self.tracks and isinstance(state, dict):
                self.tracks[name].accept.restore(state.get("accept", {}), LEARNED_WEIGHT)
                self.tracks[name].length.restore(state.get("length", {}), LEARNED_WEIGHT)
        self._forget_derived()

    def label(self) -> str:
        """A status-line label such as "auto: ngram K=6"."""
        if self._current is None or self._current.reason == "warmup":
            return "auto: measuring"
        return f"auto: {self._current.label()}"

    def summary(self) -> dict:
        """Choices made and current estimates, ready for JSON."""
        plain = self.plain_rate()
        achieved = self.achieved_rate()
        drafters = {}
        for name, track in self.tracks.items():
            rates = self.rates(name)
            best_k = 1 + max(range(len(rates)), key=rates.__getitem__) if rates else None
            drafters[name] = {
                "steps": track.steps,
                "acceptance_by_position": [round(a, 4) for a in track.accept.rates()],
                "draft_length_by_position": [round(x, 4) for x in track.length.rates()],
                "draft_s_by_length": {str(m): round(s, 6) for m, s in track.draft_cost.points().items()},
                "best_k": best_k,
                "expected_tokens_per_s": round(rates[best_k - 1], 3) if rates else None,
                "probe_every": self.probe_every[name],
                "changes": track.changes,
            }
        choices = [
            {"drafter": d, "k": k, "steps": n} for (d, k), n in sorted(self.choices.items(), key=lambda item: -item[1])
        ]
        return {
            "mode": "auto",
            "current": self.label().removeprefix("auto: "),
            "steps": self.steps,
            "choices": choices,
            "reasons": dict(self.reasons),
            "plain_tokens_per_s": round(plain, 3) if plain else None,
            "achieved_tokens_per_s": round(achieved, 3) if achieved else None,
            "verify_s_by_batch": {str(n): round(s, 6) for n, s in self.verify.points().items()},
            "seeded_costs_off_by": None
            if self.drift is None or self.drift.factor == 1.0
            else round(self.drift.factor, 4),
            "drafters": drafters,
        }
