"""A synthetic speculative-decoding environment for the auto controller: costs and acceptance without
models, so a policy can be compared with every fixed configuration in simulated (not wall-clock) time.

`python tests/sim_control.py` prints the comparison for each scenario.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from specrun.engine.auto.control import PLAIN, Ask, Choice, Controller, Outcome
from specrun.engine.auto.estimates import CostCurve
from specrun.engine.auto.plan import Candidate, Option

DRAFTERS = ("ngram", "draft", "hybrid")  # the fixed modes
AUTO_DRAFTERS = ("ngram", "draft")
CPU_VERIFY = {1: 1.0, 2: 1.49, 5: 2.07}  # measured: verify cost in plain decodes, by batch size
FAR = 64  # batch size up to which `verify_slope` continues the measured points


class OneSequence(Controller):
    """A controller driven for one sequence alone, as the engine drives it for a batch of one:
    `choose` is `plan` for one Ask (with the proposal of the drafter named `lookup` in hand, when
    given), `observe_step` folds one step in through `observe`. The tests read decisions this way."""

    def __init__(self, *args, lookup: str | None = "ngram", **kw):
        super().__init__(*args, **kw)
        self.lookup = lookup
        self.last: Choice | None = None

    def choose(
        self, lookup_confidence: Sequence[float] | None = None, *, remaining: int | None = None, catchup_s=None
    ) -> Choice:
        in_hand = {}
        if lookup_confidence is not None and self.lookup in self.tracks:
            in_hand = {self.lookup: list(lookup_confidence)}
        ask = Ask(0, self.k_max, remaining, {}, in_hand, catchup_s or {})
        self.last = self.plan([ask], max_rows=self.k_max + 1).choice(0)
        return self.last

    def observe_step(
        self, drafter, k: int, drafted: int, accepted: int, t_draft: float, t_verify: float, n_batch: int, reason=None
    ) -> None:
        """One step: what ran (drafter None or k 0: plain), the draft's length and accepted prefix, the
        seconds drafting and verifying, the verify batch; the reason is the last choice's."""
        if reason is None:
            reason = self.last.reason if self.last is not None and self.last.drafter == drafter else "best"
        choice = Choice(drafter, k, reason) if drafter is not None and k > 0 else PLAIN
        timed = drafter is not None and drafted and drafter != self.lookup
        passes = {drafter: [(1, t_draft / drafted)] * drafted} if timed else None
        outcome = Outcome(choice, drafted, accepted, t_draft)
        self.observe([outcome], rows=n_batch, verify_s=t_verify, draft_s=t_draft, passes=passes)

    def trim(self, confidence: Sequence[float] | None, drafted: int) -> int:
        """How many leading tokens of a proposal in hand are worth verifying: the plan of one
        sequence with only that option (all of them before any cost is known)."""
        if not confidence or not self.verify or not self.verify.measured(1):
            return drafted
        candidates = [Candidate(0, [Option(self.lookup, list(confidence[:drafted]))], drafted)]
        return self.allocation(candidates, max_rows=drafted + 1).k(0)

    def best(self) -> Choice:
        """What the estimates alone choose for one sequence: no proposal in hand, no exploration."""
        candidates = [Candidate(0, self._options(Ask(0, self.k_max)), self.k_max)]
        alloc = self.allocation(candidates, max_rows=self.k_max + 1)
        drafter, k = alloc.drafter(0), alloc.k(0)
        return Choice(drafter, k) if drafter and k else PLAIN


@dataclass(frozen=True)
class Costs:
    """Seconds of one plain decode, of one draft-model token, of one prompt lookup; verify multiples."""

    plain: float = 0.071
    draft_token: float = 0.037
    ngram: float = 0.0001
    verify_points: dict[int, float] = field(default_factory=lambda: dict(CPU_VERIFY))
    verify_slope: float = 0.27  # plain decodes per extra token beyond the measured points
    noise: float = 0.03  # relative timing jitter

    @cached_property
    def curve(self) -> CostCurve:
        """The points, continued beyond the last one by `verify_slope`, in plain decodes."""
        last = max(self.verify_points)
        far = {FAR: self.verify_points[last] + self.verify_slope * (FAR - last)} if last < FAR else {}
        return CostCurve.of({**self.verify_points, **far})

    def verify(self, n: int) -> float:
        return self.plain * self.curve(n)


GPU = Costs(plain=0.020, draft_token=0.001, verify_points={1: 1.0}, verify_slope=0.02)


@dataclass(frozen=True)
class Text:
    """Which generated positions copy earlier text (prompt lookup finds them) and how good each drafter is."""

    copy_share: float = 0.0  # fraction of positions inside copied stretches
    copy_run: tuple[int, int] = (40, 160)  # length range of a copied stretch
    model_accept: float = 0.86
    copy_accept: float = 0.97  # per token, inside a copied stretch
    spurious_match: float = 0.3  # outside copies: chance lookup finds a (mostly wrong) match
    spurious_accept: float = 0.2

    def layout(self, n: int, rng: random.Random) -> list[int]:
        """For each position, how many tokens of the current copied stretch remain (0: free text)."""
        if self.copy_share <= 0:
            return [0] * n
        mean_free = sum(self.copy_run) / 2 * (1 - self.copy_share) / self.copy_share
        out: list[int] = []
        while len(out) < n:
            out.extend([0] * round(rng.uniform(0.5, 1.5) * mean_free))
            out.extend(range(rng.randint(*self.copy_run), 0, -1))
        return out[:n]


class Env:
    """Runs steps of a configuration against a text layout; time advances by the simulated costs."""

    def __init__(self, costs: Costs, text: Text, n_tokens: int, seed: int):
        self.costs = costs
        self.text = text
        self.n_tokens = n_tokens
        self.rng = random.Random(seed)
        self.copy_left = text.layout(n_tokens + 64, random.Random(seed * 7919 + 1))
        self.pos = 0
        self.time = 0.0
        self._proposal = None

    def _jitter(self, seconds: float) -> float:
        return seconds * (1 + self.costs.noise * (2 * self.rng.random() - 1))

    def _accepted(self, drafted: int, rate_at) -> int:
        for i in range(drafted):
            if self.rng.random() >= rate_at(i):
                return i
        return drafted

    def _model(self, k: int):
        """The draft model: k tokens at a per-token cost, each accepted with the same chance."""
        rate = self.text.model_accept
        return k, self._jitter(k * self.costs.draft_token), None, lambda i: rate

    def _lookup(self, k: int):
        """Prompt lookup: confident (0.95) inside a copied stretch once a few of its tokens matched,
        unsure (0.5) at its start, doubtful (0.3) about spurious matches elsewhere, else no draft.
        The proposal depends on the position only, so asking twice gives the same answer."""
        if self._proposal is None or self._proposal[0] != self.pos:
            t, pos, left = self.text, self.pos, self.copy_left[self.pos]
            if left and pos >= 3 and self.copy_left[pos - 3] == left + 3:
                found = 16, 0.95, lambda i: t.copy_accept if i < left else 0.0
            elif left:
                found = 2, 0.5, lambda i: 0.5 if i < left else 0.0
            elif self.rng.random() < t.spurious_match:
                found = 2, 0.3, lambda i: t.spurious_accept
            else:
                found = 0, None, None
            self._proposal = (pos, found)
        drafted, confidence, rate_at = self._proposal[1]
        return min(k, drafted), self._jitter(self.costs.ngram), confidence, rate_at

    def lookup_confidence(self, k: int) -> list[float]:
        """What a loop would pass to the controller: the lookup proposal's per-token confidences."""
        drafted, _, confidence, _ = self._lookup(k)
        return [confidence] * drafted

    def _hybrid(self, k: int):
        """Lookup when it is confident, else the model."""
        drafted, t_lookup, confidence, rate_at = self._lookup(k)
        if drafted and confidence >= 0.6:
            return drafted, t_lookup, confidence, rate_at
        drafted, t_model, confidence, rate_at = self._model(k)
        return drafted, t_lookup + t_model, confidence, rate_at

    def step(self, drafter: str | None, k: int, trim=None) -> tuple[int, int, float, float, int]:
        """One step; returns (drafted, accepted, t_draft, t_verify, n_batch) and advances the text.
        `trim(confidence, drafted)` may shorten the draft before it is verified."""
        drafted, t_draft, confidence, rate_at = 0, 0.0, None, None
        if drafter is not None and k > 0:
            propose = {"draft": self._model, "ngram": self._lookup, "hybrid": self._hybrid}[drafter]
            drafted, t_draft, confidence, rate_at = propose(k)
        if trim is not None and drafted:
            drafted = trim([confidence] * drafted if confidence else None, drafted)
        accepted = self._accepted(drafted, rate_at) if drafted else 0
        t_verify = self._jitter(self.costs.verify(drafted + 1))
        self.time += t_draft + t_verify
        self.pos += accepted + 1
        return drafted, accepted, t_draft, t_verify, drafted + 1

    @property
    def done(self) -> bool:
        return self.pos >= self.n_tokens


def run_fixed(costs: Costs, text: Text, choice: Choice, n_tokens: int, seed: int) -> float:
    """Simulated seconds to generate n_tokens with one configuration throughout."""
    env = Env(costs, text, n_tokens, seed)
    while not env.done:
        env.step(choice.drafter, choice.k)
    return env.time


def run_auto(
    costs: Costs,
    text: Text,
    n_tokens: int,
    seed: int,
    k_max: int = 16,
    *,
    hinted: bool = True,
    drafters: Sequence[str] = AUTO_DRAFTERS,
    **options,
) -> tuple[float, OneSequence]:
    """Simulated seconds to generate n_tokens with the auto controller, and the controller.
    `hinted`: run prompt lookup before each choice and pass its confidences (the loop's best use)."""
    env = Env(costs, text, n_tokens, seed)
    controller = OneSequence(list(drafters), k_max, **options)
    while not env.done:
        if hinted:
            choice = controller.choose(env.lookup_confidence(k_max))
            if choice.drafter != "ngram":
                env.time += costs.ngram
        else:
            choice = controller.choose()
        trim = None if hinted and choice.drafter == "ngram" else controller.trim
        drafted, accepted, t_draft, t_verify, n_batch = env.step(choice.drafter, choice.k, trim)
        controller.observe_step(choice.drafter, choice.k, drafted, accepted, t_draft, t_verify, n_batch)
    return env.time, controller


def fixed_choices(k_max: int = 16) -> list[Choice]:
    """Every configuration a sweep would try."""
    return [Choice(None, 0)] + [Choice(d, k) for d in DRAFTERS for k in range(1, (9 if d == "draft" else k_max + 1))]


def compare(costs: Costs, text: Text, n_tokens: int = 800, seeds: range = range(4)) -> dict:
    """Throughput (tokens/s, pooled over seeds) of auto and of every fixed configuration."""
    tokens = n_tokens * len(seeds)
    fixed = {c.label(): tokens / sum(run_fixed(costs, text, c, n_tokens, s) for s in seeds) for c in fixed_choices()}
    auto = tokens / sum(run_auto(costs, text, n_tokens, s)[0] for s in seeds)
    unhinted = tokens / sum(run_auto(costs, text, n_tokens, s, hinted=False)[0] for s in seeds)
    best = max(fixed, key=fixed.get)
    return {
        "auto": auto,
        "unhinted": unhinted,
        "plain": fixed["plain"],
        "best": best,
        "best_rate": fixed[best],
        "fixed": fixed,
    }


SCENARIOS = {
    "prose, CPU": (Costs(), Text()),
    "code edit, CPU": (Costs(), Text(copy_share=0.9)),
    "mixed, CPU": (Costs(), Text(copy_share=0.35, copy_run=(15, 60))),
    "prose, GPU": (GPU, Text(model_accept=0.8)),
    "mixed, GPU": (GPU, Text(copy_share=0.35, copy_run=(15, 60), model_accept=0.8)),
}


def main() -> None:
    for name, (costs, text) in SCENARIOS.items():
        r = compare(costs, text)
        print(
            f"{name:16s} auto {r['auto'] / r['plain']:.3f}x plain (unhinted {r['unhinted'] / r['plain']:.3f}x), "
            f"best fixed {r['best']} {r['best_rate'] / r['plain']:.3f}x, auto/best {r['auto'] / r['best_rate']:.3f}"
        )


if __name__ == "__main__":
    main()
