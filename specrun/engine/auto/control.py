"""The `--spec auto` policy: before each step, pick the drafter and K that maximise expected tokens
per second, plain decoding (K = 0) included, so that speculation is used only where it pays.

The controller is pure bookkeeping: the loop asks `choose()`, runs the step, and reports what it
measured with `observe_step()`. It never reads a clock or touches a model, which keeps every
decision reproducible in tests.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from .drift import CostDrift
from .estimates import AnchoredCurve, CostCurve, DrafterEstimates


def expected_tokens(acceptance: Sequence[float], k: int) -> float:
    """Tokens one step commits on average: 1 + Σ_{j≤k} Π_{i≤j} a_i, where a_i is the chance that
    draft position i is accepted given that all before it were (the target always adds one token)."""
    total, survive = 1.0, 1.0
    for rate in acceptance[:k]:
        survive *= rate
        total += survive
    return total


@dataclass(frozen=True)
class Choice:
    """What to run next: a drafter (None: plain decoding) and K, the most tokens it may draft."""

    drafter: str | None
    k: int
    reason: str = "best"  # "warmup" (measuring), "probe" (re-checking a drafter) or "best"

    def label(self) -> str:
        return "plain" if self.drafter is None or self.k <= 0 else f"{self.drafter} K={self.k}"


PLAIN = Choice(None, 0)
HOPE_MARGIN = 1.2  # full acceptance never happens: a drafter must promise this much over plain to be tried
EXPLORE_ODDS = 0.5  # the chance an untried drafter turns out as good as it could be, when weighing a try
LEARNED_WEIGHT = 8.0  # trials an earlier run's acceptance counts for: a prior, not a verdict


class Controller:
    """Chooses drafter and K per step from live estimates.

    Estimates: per drafter, acceptance and draft length by position (decaying per step that drafter
    runs) and draft seconds by draft length; target verify seconds by batch size (plain decoding is
    a batch of 1). The expected rate of (drafter, K) is expected tokens over expected seconds, the
    seconds averaged over the draft lengths the drafter actually produces under cap K (prompt lookup
    often drafts fewer than K tokens, or none).

    Exploration: one plain step and `warmup_steps` steps of each drafter at `k_start` first; later
    each drafter that is not the best is probed with K = `probe_k` every `probe_every` steps. A probe
    that fails doubles that interval (up to `probe_every_max`); one that surprises (all accepted
    where the estimate expected otherwise) is followed by another at once, and so is an empty probe
    of a cheap drafter while plain decoding is best, since it cost a plain step. Positions deeper
    than any tried borrow the drafter's pooled rate, so K grows while acceptance holds up, and a
    sudden change of acceptance drops the drafter's history (see DrafterEstimates), so K follows
    within a few steps.

    Prompt lookup knows before each step whether it has a good match, which its averages hide (a
    code block is copied, the prose around it is not). A loop that runs the lookup drafter (named
    `lookup`) first and passes its per-token confidences to `choose` gets that drafter judged on
    the proposal in hand, against the best other option, instead of on its averages.
    """

    def __init__(
        self,
        drafter_names: Sequence[str],
        k_max: int,
        *,
        lookup: str | None = "ngram",
        k_start: int = 4,
        warmup_steps: int = 3,
        probe_k: int = 2,
        probe_every: int = 16,
        probe_every_max: int = 512,
        acceptance_decay: float = 0.95,
        position_shrink: float = 4.0,
        cost_decay: float = 0.9,
        rate_decay: float = 0.98,
    ):
        if k_max < 1:
            raise ValueError("k_max must be at least 1")
        self.k_max = k_max
        self.lookup = lookup
        self.k_start = max(1, min(k_start, k_max))
        self.warmup_steps = warmup_steps
        self.probe_k = max(1, min(probe_k, k_max))
        self.probe_base = probe_every
        self.probe_every_max = probe_every_max
        self.acceptance_decay = acceptance_decay
        self.position_shrink = position_shrink
        self.cost_decay = cost_decay
        self.rate_decay = rate_decay
        self.verify = CostCurve(decay=cost_decay)
        self.ruled_out: set[str] = set()  # drafters the seeded costs showed cannot pay
        self.tracks: dict[str, DrafterEstimates] = {}
        self.probe_every: dict[str, int] = {}  # per drafter: steps between probes while it is not the best
        self.next_probe: dict[str, int] = {}
        self._profiles: dict[str, list[tuple[float, float]] | None] = {}  # until the next observation
        for name in drafter_names:
            self._track(name)
        self.steps = 0
        self.choices: Counter[tuple[str | None, int]] = Counter()
        self.reasons: Counter[str] = Counter()
        self._probing: str | None = None
        self._current: Choice | None = None
        self._hinted = False  # the last choice was made with the lookup's proposal in hand
        self._recent_tokens = 0.0  # decayed tokens and seconds of recent steps: the achieved rate
        self._recent_seconds = 0.0
        self.drift: CostDrift | None = None  # are the seeded costs this machine's? (see drift.py)
        self._seeded_draft: dict[str, float] = {}
        self.remaining: int | None = None  # tokens the generation may still produce (None: unknown)
        self.catchup_s: dict[str, float] = {}  # seconds a drafter must spend before it can draft (a cache behind)

    def seed(self, verify_s: dict[int, float], draft_token_s: dict[str, float] | None = None) -> None:
        """Start from measured costs: target pass seconds by batch size, and seconds per drafted token
        of model drafters. Decisions can then weigh each option from the first step, and a drafter
        that cannot win even at full acceptance is never warmed up."""
        self.verify = AnchoredCurve(verify_s, decay=self.cost_decay) if verify_s else CostCurve(decay=self.cost_decay)
        self._seeded_draft = dict(draft_token_s or {})
        for name, per_token in self._seeded_draft.items():
            self._seed_draft_cost(name, per_token)
        self.drift = CostDrift(verify_s) if verify_s else None
        self._profiles.clear()
        # Judged once, from one consistent calibration: later plain steps run at longer contexts
        # than the calibration's larger batches and would make the comparison drift.
        self.ruled_out = {name for name in self._seeded_draft if self.hopeless(name)}

    def _seed_draft_cost(self, name: str, per_token: float) -> None:
        track = self._track(name)
        track.draft_cost = CostCurve(decay=self.cost_decay)
        for m in (1, self.k_max):
            track.draft_cost.add(m, m * per_token)

    def _correct_costs(self, factor: float) -> None:
        """The seeded costs proved off by `factor`: every seeded cost is scaled by it (draft costs
        too, where that drafter has not been timed yet), and the steps that proved it count as
        measurements. The hopeless verdicts are taken again from the corrected costs."""
        verify = AnchoredCurve(self.drift.curve.points(), decay=self.cost_decay)
        for size, seconds in self.drift.observations():
            verify.add(size, seconds)
        self.verify = verify
        for name, per_token in self._seeded_draft.items():
            if self.tracks[name].steps == 0:
                self._seed_draft_cost(name, per_token * self.drift.factor)
        self._profiles.clear()
        self.ruled_out = {name for name in self._seeded_draft if self.tracks[name].steps == 0 and self.hopeless(name)}

    def _track(self, name: str) -> DrafterEstimates:
        if name not in self.tracks:
            self.tracks[name] = DrafterEstimates(
                self.k_max, self.acceptance_decay, self.position_shrink, self.cost_decay
            )
            self.probe_every[name] = self.probe_base
            self.next_probe[name] = 0
        return self.tracks[name]

    # -- estimates ---------------------------------------------------------------------------

    def plain_rate(self) -> float | None:
        """Expected tokens per second of plain decoding, once a verify time is known."""
        return 1.0 / max(self.verify(1), 1e-12) if self.verify else None

    def profile(self, drafter: str) -> list[tuple[float, float]] | None:
        """(expected tokens, expected seconds) of one step of `drafter` for K = 1..k_max; None until
        its costs are known. Draft length m under cap K has P(m ≥ j) = Π_{i≤j} l_i, and the step
        costs draft(m) + verify(m + 1)."""
        if drafter not in self._profiles:
            self._profiles[drafter] = self._profile(drafter)
        return self._profiles[drafter]

    def _profile(self, drafter: str) -> list[tuple[float, float]] | None:
        track = self.tracks.get(drafter)
        if track is None or not track.draft_cost or not self.verify:
            return None
        accept = track.accept.survival()
        reach = [1.0] + track.length.survival()
        cost = [track.draft_cost(m) + self.verify(m + 1) for m in range(self.k_max + 1)]
        out, tokens, shorter = [], 1.0, 0.0
        for k in range(1, self.k_max + 1):
            tokens += accept[k - 1]
            shorter += (reach[k - 1] - reach[k]) * cost[k - 1]
            out.append((tokens, max(shorter + reach[k] * cost[k], 1e-12)))
        return out

    def rates(self, drafter: str) -> list[float] | None:
        """Expected tokens per second of `drafter` for K = 1..k_max (None until its costs are known)."""
        profile = self.profile(drafter)
        return None if profile is None else [tokens / seconds for tokens, seconds in profile]

    def best(self, *, skip: str | None = None) -> Choice:
        """The configuration with the highest expected rate (plain decoding wins ties)."""
        return self._best(skip)[0]

    def _best(self, skip: str | None = None) -> tuple[Choice, float]:
        plain = self.plain_rate() or 0.0
        best, best_rate = PLAIN, plain
        for name in self.tracks:
            if name == skip:
                continue
            for k, rate in enumerate(self.rates(name) or [], start=1):
                if rate > best_rate and self._repays_catchup(name, rate, plain):
                    best, best_rate = Choice(name, k), rate
        return best, best_rate

    def _repays_catchup(self, name: str, rate: float, plain: float) -> bool:
        """A drafter whose cache must first catch up (the draft model after plain steps) is worth
        switching to only if its gain over the tokens left pays for that."""
        catchup = self.catchup_s.get(name, 0.0)
        if not catchup or self.remaining is None or plain <= 0:
            return True
        return self.remaining * (1.0 / plain - 1.0 / rate) > catchup

    def achieved_rate(self) -> float | None:
        """Tokens per second over recent steps, whatever ran."""
        return self._recent_tokens / self._recent_seconds if self._recent_seconds > 0 else None

    def time_value(self) -> float:
        """Tokens a second is worth: the better of the best configuration's rate and the rate
        achieved lately. A step is worth taking when its tokens exceed its seconds times this."""
        skip = self.lookup if self._hinted else None
        return max(self._best(skip)[1], self.achieved_rate() or 0.0)

    def trim(self, confidence: Sequence[float] | None, drafted: int) -> int:
        """How many leading draft tokens are worth verifying, given each token's confidence (the
        chance it is accepted if all before it were). None or too little measured: all of them.
        The confidences must estimate acceptance, as prompt lookup's do; a draft model's top
        probability does not under sampling, and cutting on it would cost accepted tokens.

        The prefix kept is the one whose expected tokens most exceed its verify time at the current
        value of time, every later token's own confidence counted: a doubtful first token followed
        by a confident copy is worth a long batch, which judging token by token would refuse. A
        batch costs what the cheapest batch at least as large that the draft can fill costs
        (`batch_cost`). Only deterministic drafts (prompt lookup) are trimmed: choosing a sampled
        draft's length from its later tokens would bias the proposal.
        """
        value = self.time_value()
        if not confidence or value <= 0 or not self.verify:
            return drafted
        best, best_worth = 0, 1.0 - value * self.batch_cost(1, drafted)
        tokens, survive = 1.0, 1.0
        for m, c in enumerate(confidence[:drafted], start=1):
            survive *= c
            tokens += survive
            worth = tokens - value * self.batch_cost(m + 1, drafted)
            if worth > best_worth:
                best, best_worth = m, worth
        return best

    def batch_cost(self, size: int, drafted: int) -> float:
        """Seconds to verify `size` tokens when `drafted` draft tokens are in hand: the cheapest
        batch from `size` up to drafted + 1 tokens, since extra draft tokens ride along for free."""
        return self.verify.cheapest(size, min(drafted, self.k_max) + 1)[1]

    # -- the per-step protocol ---------------------------------------------------------------

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
        self._profiles.clear()

    def worth_exploring(self, drafter: str, steps: int = 1) -> bool:
        """Whether trying `drafter` for `steps` steps can repay itself within the tokens left: a try
        costs its step over a plain one (and any catch-up its cache needs first); it pays back only
        if the drafter turns out good (EXPLORE_ODDS), by at most the time its ceiling saves per
        token over the remaining tokens. Unknown costs or budget: worth it."""
        ceiling, plain = self.ceiling(drafter), self.plain_rate()
        if self.remaining is None or ceiling is None or plain is None:
            return True
        track = self.tracks[drafter]
        k = self.probe_k if track.steps >= self.warmup_steps else self.k_start
        extra = steps * (track.draft_cost(k) + self.verify(k + 1) - self.verify(1)) + self.catchup_s.get(drafter, 0.0)
        saving = EXPLORE_ODDS * self.remaining * (1.0 / plain - 1.0 / ceiling)
        return saving > extra

    def choose(self, lookup_confidence: Sequence[float] | None = None, *, remaining: int | None = None,
               catchup_s: dict[str, float] | None = None) -> Choice:
        """The configuration for the next step: measuring first, then the best, with sparse probes.

        `lookup_confidence`: the confidences of the lookup drafter's proposal for this step (drafted
        with K = k_max; empty when it found no match). When given, a lookup choice's K is the number
        of those tokens worth verifying, and the loop verifies that prefix of the proposal in hand.
        """
        self._hinted = lookup_confidence is not None and self.lookup is not None
        self.remaining = remaining
        self.catchup_s = catchup_s or {}
        choice = self._warmup() or (self._decide_hinted(lookup_confidence) if self._hinted else self._decide())
        self.choices[(choice.drafter, choice.k)] += 1
        self.reasons[choice.reason] += 1
        self._probing = choice.drafter if choice.reason == "probe" else None
        if choice.reason != "probe":
            self._current = choice
        return choice

    def _warmup(self) -> Choice | None:
        if 1 not in self.verify.count:
            return Choice(None, 0, "warmup")
        for name, track in self.tracks.items():
            if (track.steps < self.warmup_steps and not (self._hinted and name == self.lookup) and not self.hopeless(name)
                    and self.worth_exploring(name, self.warmup_steps - track.steps)):
                return Choice(name, self.k_start, "warmup")
        return None

    def ceiling(self, drafter: str) -> float | None:
        """Tokens per second of `drafter` if every token it drafted were accepted (None: costs not
        measured yet). Below plain decoding's rate, no acceptance rate can make it pay."""
        track = self.tracks.get(drafter)
        if track is None or not track.draft_cost or not self.verify:
            return None
        return max((k + 1) / max(track.draft_cost(k) + self.verify(k + 1), 1e-12) for k in range(1, self.k_max + 1))

    def hopeless(self, drafter: str) -> bool:
        """Measured costs say the drafter cannot beat plain decoding by HOPE_MARGIN even if every
        token it drafted were accepted, so measuring its acceptance is wasted time (and, for a
        draft model, each try costs a catch-up pass over the text it missed): it is neither
        warmed up nor probed."""
        if drafter in self.ruled_out:
            return True
        ceiling, plain = self.ceiling(drafter), self.plain_rate()
        return ceiling is not None and plain is not None and ceiling < HOPE_MARGIN * plain

    def _probe_or(self, best: Choice) -> Choice:
        """A due probe of a drafter other than the best, else the best (whose probe interval resets)."""
        for name, due in self.next_probe.items():
            if (name != best.drafter and self.steps >= due and not (self._hinted and name == self.lookup)
                    and not self.hopeless(name) and self.worth_exploring(name)):
                return Choice(name, self.probe_k, "probe")
        if best.drafter is not None:
            self.probe_every[best.drafter] = self.probe_base
        return best

    def _decide(self) -> Choice:
        return self._probe_or(self.best())

    def _decide_hinted(self, confidence: Sequence[float]) -> Choice:
        """Compare, at the current value of time, the lookup's proposal in hand with the best other
        option: each is worth its expected tokens minus its expected seconds times that value."""
        value = self.time_value()
        best, best_worth = PLAIN, 1.0 - value * self.verify(1)
        plain = self.plain_rate() or 0.0
        for name in self.tracks:
            if name == self.lookup:
                continue
            for k, (tokens, seconds) in enumerate(self.profile(name) or [], start=1):
                if tokens - value * seconds > best_worth and self._repays_catchup(name, tokens / seconds, plain):
                    best, best_worth = Choice(name, k), tokens - value * seconds
        if confidence and len(self.verify.count) < 2:
            # Only single-token passes measured: verify costs for a batch are a guess that would
            # veto every lookup draft, so take this proposal once to measure them.
            return Choice(self.lookup, min(len(confidence), self.k_max), "warmup")
        drafted = min(len(confidence), self.k_max)
        keep = self.trim(confidence, drafted)
        if keep:
            # Fill the cheapest batch the kept tokens fit in with the draft's next tokens.
            size, seconds = self.verify.cheapest(keep + 1, drafted + 1)
            keep = size - 1
            track = self._track(self.lookup)
            draft_seconds = track.draft_cost(keep) if track.draft_cost else 0.0
            tokens = expected_tokens(confidence, keep)
            if tokens - value * (draft_seconds + seconds) > best_worth:
                return Choice(self.lookup, keep)
        return self._probe_or(best)

    def observe_step(
        self,
        drafter: str | None,
        k: int,
        drafted: int,
        accepted: int,
        t_draft: float,
        t_verify: float,
        n_batch: int,
    ) -> None:
        """Fold in one step: what ran (drafter None or k 0: plain), the draft's length and accepted
        prefix, the seconds spent drafting and verifying, and the verify batch size (drafted + 1)."""
        self.steps += 1
        self._profiles.clear()
        self.verify.add(n_batch, t_verify)
        if self.drift is not None and self.drift.observe(n_batch, t_verify) is not None:
            self._correct_costs(self.drift.factor)
        self._recent_tokens = self.rate_decay * self._recent_tokens + accepted + 1
        self._recent_seconds = self.rate_decay * self._recent_seconds + t_draft + t_verify
        if drafter is None or k <= 0:
            return
        track = self._track(drafter)
        probing = self._probing == drafter
        surprise = probing and drafted > 0 and accepted == drafted and track.accept.survival(drafted)[-1] < 0.5
        track.update(k, drafted, accepted, t_draft)
        if probing:
            self._probing = None
            plain_is_best = self._current is None or self._current.drafter is None
            free = plain_is_best and drafted == 0 and t_draft <= 0.05 * self.verify(1)
            if surprise or free:
                self.next_probe[drafter] = self.steps
                return
            self.probe_every[drafter] = min(2 * self.probe_every[drafter], self.probe_every_max)
        self.next_probe[drafter] = self.steps + self.probe_every[drafter]

    # -- reporting ---------------------------------------------------------------------------

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
            {"drafter": d, "k": k, "steps": n}
            for (d, k), n in sorted(self.choices.items(), key=lambda item: -item[1])
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
            "seeded_costs_off_by": None if self.drift is None or self.drift.factor == 1.0 else round(self.drift.factor, 4),
            "drafters": drafters,
        }
