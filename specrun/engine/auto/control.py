"""The `--spec auto` decision, for one sequence or many: before each step, pick each sequence's
drafter and K (plain decoding, K = 0, included) so that speculation is used only where it pays.

The controller is pure bookkeeping: the engine asks `plan()` with every decoding sequence's
options, runs the step, and reports what it measured with `observe()`. It never reads a clock or
touches a model, which keeps every decision reproducible in tests. The decision itself is
plan.allocate; what it is fed comes from estimation.py (estimates, costs), and the exploration
around it (warm-up, probes and their budget) from explore.py. What is here is the per-step
protocol that joins them, and the reports of what was decided.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from ... import defaults
from .cost_model import survival
from .explore import Exploration
from .plan import Allocation, Candidate, Grant, Option, allocate
from .protocol import PLAIN, Ask, Choice, Decision, Outcome

VALUE_ROUNDS = 3  # plans made to find the value of time a step can reach (see _allocate)
LEARNED_WEIGHT = 8.0  # trials an earlier run's acceptance counts for: a prior, not a verdict
REACH_FLOOR = 1e-3  # a draft position reached less often than this adds nothing worth weighing


def reachable(acceptance: list[float]) -> list[float]:
    """The positions of an estimate a draft reaches at least REACH_FLOOR of the time (the first
    always): the plan weighs every K of every option, so positions that can add nothing are not
    offered at all."""
    for j, survive in enumerate(survival(acceptance)):
        if survive < REACH_FLOOR:
            return acceptance[: j + 1]
    return acceptance


class Controller(Exploration):
    """Chooses drafter and K per sequence and step from live estimates (see Estimation), with
    warm-ups and probes where due (see Exploration).

    A sequence's option is its drafter with the pooled acceptance leaned on by its own, or, for a
    drafter whose proposal is in hand (prompt lookup), that proposal's own confidences;
    plan.allocate weighs them all at once. A drafter that proposes before every step (its proposal
    is in the Ask's `in_hand`) is judged on that proposal, not on its averages, and never warmed up
    or probed.
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
        super().__init__(
            k_max,
            k_start=k_start,
            warmup_steps=warmup_steps,
            probe_k=probe_k,
            probe_every=probe_every,
            probe_every_max=probe_every_max,
            explore_share=explore_share,
            drafter_k_max=drafter_k_max,
            acceptance_decay=acceptance_decay,
            position_shrink=position_shrink,
            cost_decay=cost_decay,
            rate_decay=rate_decay,
        )
        for name in drafter_names:
            self._track(name)
        self.choices: Counter[tuple[str | None, int]] = Counter()
        self.reasons: Counter[str] = Counter()
        self._current: Choice | None = None  # the last choice made as the best, for the label

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
                options.append(
                    Option(name, reachable(self.acceptance(name, ask.own.get(name), self._k_max_for(name, ask))))
                )
        return options

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

    def _record(self, decision: Decision) -> Decision:
        self._count_use(decision)
        for choice in decision.choices.values():
            self.choices[(choice.drafter, choice.k)] += 1
            self.reasons[choice.reason] += 1
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
        self._measure(outcomes, rows, verify_s, draft_s, passes)
        self.busy_s += draft_s + verify_s
        plain_is_best = self._current is None or self._current.drafter is None
        for outcome in outcomes:
            choice = outcome.choice
            if choice.drafter is None or choice.k <= 0:
                continue
            self._observe_drafter(choice, outcome, plain_is_best, verify_s)

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
