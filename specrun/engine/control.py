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

from .estimates import CostCurve, PositionRates


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


class _Track:
    """Everything known about one drafter: acceptance and draft length by position, draft cost."""

    def __init__(self, k_max: int, decay: float, cost_decay: float, probe_every: int):
        self.accept = PositionRates(k_max, decay=decay)
        self.length = PositionRates(k_max, decay=decay, prior=0.9)
        self.draft_cost = CostCurve(decay=cost_decay)
        self.steps = 0
        self.probe_every = probe_every
        self.next_probe = 0


class Controller:
    """Chooses drafter and K per step from live estimates; see the module docstring.

    Estimates: per drafter, acceptance and draft length by position (decaying per step that drafter
    runs), draft seconds by draft length; target verify seconds by batch size (plain decoding is a
    batch of 1). Expected rate of (drafter, K) = expected tokens / expected seconds, where the
    seconds average over the draft lengths the drafter actually produces under cap K (prompt lookup
    often drafts fewer than K tokens, or none).

    Exploration: one plain step and `warmup_steps` steps of each drafter at `k_start` first; later a
    drafter that is not the best is probed with K = `probe_k` every `probe_every` steps. A probe
    that fails doubles the interval (up to `probe_every_max`); one that surprises (all accepted where
    the estimate expected otherwise) is followed by another at once, and an empty probe from a cheap
    drafter is retried at once, since it cost a plain step. Deeper positions than any tried borrow
    the drafter's pooled rate, so K grows while acceptance holds up.
    """

    def __init__(
        self,
        drafter_names: Sequence[str],
        k_max: int,
        *,
        k_start: int = 4,
        warmup_steps: int = 3,
        probe_k: int = 2,
        probe_every: int = 16,
        probe_every_max: int = 512,
        acceptance_decay: float = 0.92,
        cost_decay: float = 0.9,
    ):
        if k_max < 1:
            raise ValueError("k_max must be at least 1")
        self.k_max = k_max
        self.k_start = max(1, min(k_start, k_max))
        self.warmup_steps = warmup_steps
        self.probe_k = max(1, min(probe_k, k_max))
        self.probe_every = probe_every
        self.probe_every_max = probe_every_max
        self.acceptance_decay = acceptance_decay
        self.cost_decay = cost_decay
        self.verify = CostCurve(decay=cost_decay)
        self.tracks: dict[str, _Track] = {}
        for name in drafter_names:
            self._track(name)
        self.steps = 0
        self.choices: Counter[tuple[str | None, int]] = Counter()
        self.reasons: Counter[str] = Counter()
        self._probing: str | None = None
        self._current: Choice | None = None
        self._rate = 0.0  # expected tokens per second of the best configuration, as of the last choice

    def _track(self, name: str) -> _Track:
        if name not in self.tracks:
            self.tracks[name] = _Track(self.k_max, self.acceptance_decay, self.cost_decay, self.probe_every)
        return self.tracks[name]

    # -- estimates ---------------------------------------------------------------------------

    def plain_rate(self) -> float | None:
        """Expected tokens per second of plain decoding, once a verify time is known."""
        return 1.0 / max(self.verify(1), 1e-12) if self.verify else None

    def rates(self, drafter: str) -> list[float] | None:
        """Expected tokens per second of `drafter` for K = 1..k_max (None until its costs are known).

        Draft length m under cap K has P(m ≥ j) = Π_{i≤j} l_i; the step costs draft(m) + verify(m + 1).
        """
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
            seconds = shorter + reach[k] * cost[k]
            out.append(tokens / max(seconds, 1e-12))
        return out

    def estimate(self, drafter: str | None, k: int) -> float | None:
        """Expected tokens per second of one configuration (None: not measured yet)."""
        if drafter is None or k <= 0:
            return self.plain_rate()
        rates = self.rates(drafter)
        return None if rates is None else rates[min(k, self.k_max) - 1]

    def best(self) -> Choice:
        """The configuration with the highest expected rate; plain decoding wins ties."""
        return self._best()[0]

    def _best(self) -> tuple[Choice, float]:
        best, best_rate = PLAIN, self.plain_rate() or 0.0
        for name in self.tracks:
            for k, rate in enumerate(self.rates(name) or [], start=1):
                if rate > best_rate:
                    best, best_rate = Choice(name, k), rate
        return best, best_rate

    def trim(self, confidence: Sequence[float] | None, drafted: int) -> int:
        """How many leading draft tokens are worth verifying, given each token's confidence (the
        chance it is accepted if all before it were). None or too little measured: all of them.

        Token j is kept while the tokens it is expected to add are worth more than the extra verify
        time at the current best rate, looking ahead as if later tokens were as confident as j, since
        a concave verify cost can make several tokens pay where one alone does not. The decision at
        token j uses confidences up to j only, so a sampled draft stays lossless.
        """
        if not confidence or self._rate <= 0 or not self.verify:
            return drafted
        survive = 1.0
        for j, c in enumerate(confidence[:drafted], start=1):
            gain = survive * c
            if gain <= self._rate * (self.verify(j + 1) - self.verify(j)) and not self._pays_ahead(j, gain, c):
                return j - 1
            survive = gain
        return drafted

    def _pays_ahead(self, j: int, gain: float, c: float) -> bool:
        base, tokens = self.verify(j), 0.0
        for end in range(j, self.k_max + 1):
            tokens += gain
            gain *= c
            if tokens > self._rate * (self.verify(end + 1) - base):
                return True
        return False

    # -- the per-step protocol ---------------------------------------------------------------

    def choose(self) -> Choice:
        """The configuration for the next step: measuring first, then the best, with sparse probes."""
        choice = self._warmup() or self._decide()
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
            if track.steps < self.warmup_steps:
                return Choice(name, self.k_start, "warmup")
        return None

    def _decide(self) -> Choice:
        best, self._rate = self._best()
        for name, track in self.tracks.items():
            if name != best.drafter and self.steps >= track.next_probe:
                return Choice(name, self.probe_k, "probe")
        if best.drafter is not None:
            self.tracks[best.drafter].probe_every = self.probe_every
        return best

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
        self.verify.add(n_batch, t_verify)
        if drafter is None or k <= 0:
            return
        track = self._track(drafter)
        probing = self._probing == drafter
        surprise = probing and drafted > 0 and accepted == drafted and track.accept.survival(drafted)[-1] < 0.5
        track.accept.update(k, accepted)
        track.length.update(k, drafted)
        track.draft_cost.add(drafted, t_draft)
        track.steps += 1
        if probing:
            self._probing = None
            plain_is_best = self._current is None or self._current.drafter is None
            free = plain_is_best and drafted == 0 and t_draft <= 0.05 * self.verify(1)
            if not (surprise or free):
                track.probe_every = min(2 * track.probe_every, self.probe_every_max)
                track.next_probe = self.steps + track.probe_every
            else:
                track.next_probe = self.steps
        else:
            track.next_probe = self.steps + track.probe_every

    # -- reporting ---------------------------------------------------------------------------

    def label(self) -> str:
        """A status-line label such as "auto: ngram K=6"."""
        if self._current is None or self._current.reason == "warmup":
            return "auto: measuring"
        return f"auto: {self._current.label()}"

    def summary(self) -> dict:
        """Choices made and current estimates, ready for JSON."""
        plain = self.plain_rate()
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
                "probe_every": track.probe_every,
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
            "verify_s_by_batch": {str(n): round(s, 6) for n, s in self.verify.points().items()},
            "drafters": drafters,
        }
