"""What the auto controller expects of each option: cost curves, acceptance by position, and the
expected tokens per second they make for each drafter and K, kept apart from exploration (which
decides what to try to improve them) and from the per-step protocol (control.py).

estimates.py keeps the running estimators of single quantities; this module holds the ones the
controller keeps (a drafter's acceptance and draft length, target and drafter pass seconds) and
what is derived from them for a decision, read once per observation: a step weighs every K of every
drafter, so the derived values are remembered until the next observation changes what they rest on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from ... import defaults
from .cost_model import Costs
from .drift import CostDrift
from .estimates import CalibratedCurve, DrafterEstimates, PositionRates
from .protocol import Ask, Outcome

HOPE_MARGIN = defaults.HOPE_MARGIN
OWN_EVIDENCE = 4.0  # trials at which a sequence's own acceptance counts as much as the pooled estimate


class Estimation:
    """Live estimates, per drafter: acceptance and draft length by position (decaying per step that
    drafter runs, pooled over every sequence), seconds of a drafter's pass by its rows, and target
    pass seconds by batch size; each sequence's own acceptance is kept beside them by the sequence
    (`own_rates`) and leans on the pooled estimate (OWN_EVIDENCE trials weigh as much as the pool).
    A drafter whose ceiling (its rate at full acceptance) cannot beat plain decoding by HOPE_MARGIN
    is hopeless."""

    def __init__(
        self,
        k_max: int,
        *,
        drafter_k_max: Mapping[str, int] | None,
        acceptance_decay: float,
        position_shrink: float,
        cost_decay: float,
        rate_decay: float,
    ):
        if k_max < 1:
            raise ValueError("k_max must be at least 1")
        self.k_max = k_max
        self.drafter_k_max = dict(drafter_k_max or {})  # drafters that draft fewer tokens a step (chained MTP heads)
        self.acceptance_decay = acceptance_decay
        self.position_shrink = position_shrink
        self.cost_decay = cost_decay
        self.rate_decay = rate_decay
        self.verify = CalibratedCurve(decay=cost_decay)
        self.passes: dict[str, CalibratedCurve] = {}  # per drafter that runs passes: seconds by rows
        self.blocks: frozenset[str] = frozenset()  # those of them that draft a whole block per pass
        self.ruled_out: set[str] = set()  # drafters the seeded costs showed cannot pay
        self.tracks: dict[str, DrafterEstimates] = {}
        self._profiles: dict[str, list[tuple[float, float]] | None] = {}  # until the next observation
        self._costs: Costs | None = None  # likewise
        self._step_s: dict[str, list[float]] = {}  # likewise
        self._ceilings: dict[str, float | None] = {}  # likewise
        self._recent_tokens = 0.0  # decayed tokens and seconds of recent steps: the achieved rate
        self._recent_seconds = 0.0
        self.drift: CostDrift | None = None  # are the seeded costs this machine's? (see drift.py)

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

    def _measure(
        self,
        outcomes: Sequence[Outcome],
        rows: int | None,
        verify_s: float,
        draft_s: float,
        passes: Mapping[str, Sequence[tuple[int, float]]] | None,
    ) -> None:
        """Fold in one step's costs: the target pass (its rows, or None when it says nothing of
        decoding's cost), each drafter's passes (rows, seconds), and the tokens and seconds of the
        step for the achieved rate."""
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

    def _forget_derived(self) -> None:
        """Costs or estimates changed: what was computed from them is computed again when asked.
        A step weighs every K of every drafter, so it reads the curves once per observation."""
        self._profiles.clear()
        self._step_s.clear()
        self._ceilings.clear()
        self._costs = None

    def k_max_of(self, drafter: str) -> int:
        """The most tokens `drafter` ever drafts a step: k_max, or its own cap (a DFlash block, a
        chain of MTP heads), beyond which its costs and rates are never read."""
        return min(self.k_max, self.drafter_k_max.get(drafter, self.k_max))

    def _k_max_for(self, name: str, ask: Ask) -> int:
        """The most tokens `name` may draft for `ask` this step."""
        return min(ask.k_max, self.k_max_of(name))

    def _step_costs(self, drafter: str) -> list[float]:
        """Seconds of one sequence's step drafting m tokens with `drafter`, for m = 0..k_max_of(drafter) (read
        once per observation: the ceiling, hopelessness and exploration's worth all ask)."""
        if drafter not in self._step_s:
            costs = self.costs()
            self._step_s[drafter] = [costs.step_seconds(m, drafter) for m in range(self.k_max_of(drafter) + 1)]
        return self._step_s[drafter]

    def _track(self, name: str) -> DrafterEstimates:
        if name not in self.tracks:
            self.tracks[name] = DrafterEstimates(
                self.k_max, self.acceptance_decay, self.position_shrink, self.cost_decay
            )
        return self.tracks[name]

    def own_rates(self) -> PositionRates:
        """A sequence's own acceptance evidence for one drafter, kept by the sequence."""
        return PositionRates(self.k_max, decay=self.acceptance_decay)

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
        """(expected tokens, expected seconds) of one sequence's step with `drafter` for K = 1..k_max_of(drafter);
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
        for k in range(1, self.k_max_of(drafter) + 1):
            tokens += accept[k - 1]
            shorter += (reach[k - 1] - reach[k]) * cost[k - 1]
            out.append((tokens, max(shorter + reach[k] * cost[k], 1e-12)))
        return out

    def rates(self, drafter: str) -> list[float] | None:
        """Expected tokens per second of `drafter` for K = 1..k_max_of(drafter) (None until its costs are known)."""
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

    def catch_up_seconds(self, drafter: str, behind: int) -> float:
        """Seconds `drafter` needs to read `behind` tokens it missed before it can draft (its
        first pass reads at least one token, which its draft's own cost counts)."""
        curve = self.passes.get(drafter)
        return curve(behind) if curve and behind > 1 else 0.0

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
