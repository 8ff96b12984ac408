"""What to draft each step: a fixed drafter and K, or the `auto` controller's choice.

The loop asks a policy for a Plan before each step (the draft in hand, which drafter made it, and
the K it was allowed) and reports back what the step cost and how much was accepted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..drafting.protocol import Draft, Drafter
from .control import Controller


@dataclass
class Plan:
    """One step's proposal: `name` is the drafter behind it (None: plain decoding)."""

    name: str | None
    k: int
    draft: Draft = field(default_factory=Draft)
    source: Drafter | None = None  # gets feedback on how many tokens were accepted


class FixedPolicy:
    """Always the same drafter with up to K tokens (`off` when the drafter is None)."""

    def __init__(self, drafter: Drafter | None, k: int):
        self.drafter = drafter
        self.k = k if drafter is not None else 0

    def plan(self, history: Sequence[int], budget: int) -> Plan:
        k = min(self.k, budget)
        if self.drafter is None or k <= 0:
            return Plan(None, 0)
        draft = self.drafter.propose(history, k)
        return Plan(self.drafter.source.name, k, draft, self.drafter)

    def prefill(self, prompt: Sequence[int]) -> None:
        """Let a model drafter read the prompt during the prefill (it counts in time to first token)."""
        if self.drafter is not None:
            self.drafter.prefill(prompt)

    def observe(self, plan: Plan, accepted: int, t_draft: float, t_verify: float) -> None:
        """Fixed policies do not adapt."""

    def finish(self) -> None:
        """Fixed policies keep nothing between generations."""

    def label(self) -> str:
        if self.drafter is None:
            return "plain"
        return f"{self.drafter.name} K={self.k}"

    def summary(self) -> dict | None:
        return None


class AutoPolicy:
    """The controller picks plain decoding, prompt lookup or the draft model, and K, every step.

    Prompt lookup is asked first (it costs microseconds) so the controller can judge the match in
    hand; the draft model is only run when the controller picks it.
    """

    def __init__(self, controller: Controller, lookup: Drafter, model: Drafter | None, *, catchup_token_s: float = 0.0,
                 on_finish: Callable[["AutoPolicy"], None] | None = None):
        self.controller = controller
        self.lookup = lookup
        self.model = model
        self.catchup_token_s = catchup_token_s  # seconds per prompt or history token the draft model must catch up on
        self.on_finish = on_finish
        self.last = "auto: measuring"
        self._catchup_spent = 0.0  # seconds the last plan spent bringing the draft model's cache up to date

    def plan(self, history: Sequence[int], budget: int) -> Plan:
        cap = min(self.controller.k_max, budget)
        hint = self.lookup.propose(history, cap) if cap > 0 else Draft()
        catchup = {}
        if self.model is not None and self.catchup_token_s:
            catchup[self.model.name] = self.model.behind(history) * self.catchup_token_s
        choice = self.controller.choose(hint.confidence or [], remaining=budget, catchup_s=catchup)
        k = min(choice.k, budget)
        self.last = f"auto: {choice.label()}"
        if choice.drafter is None or k <= 0:
            return Plan(None, 0)
        if choice.drafter == self.lookup.name:
            kept = hint.tokens[:k]
            return Plan(self.lookup.name, k, Draft(kept, None, (hint.confidence or [])[: len(kept)]), self.lookup)
        drafter = self.model
        start = time.perf_counter()
        drafter.catch_up(history)  # timed apart: it is not what drafting k tokens costs
        self._catchup_spent = time.perf_counter() - start
        return Plan(drafter.name, k, drafter.propose(history, k), drafter)

    def prefill(self, prompt: Sequence[int]) -> None:
        """Nothing is read ahead: the draft model catches up on the prompt only when the controller
        first picks it (a cost it weighs), so the time to first token is plain decoding's."""

    def finish(self) -> None:
        if self.on_finish is not None:
            self.on_finish(self)

    def observe(self, plan: Plan, accepted: int, t_draft: float, t_verify: float) -> None:
        drafted = len(plan.draft.tokens)
        t_draft, self._catchup_spent = max(0.0, t_draft - self._catchup_spent), 0.0
        self.controller.observe_step(plan.name, plan.k, drafted, accepted, t_draft, t_verify, drafted + 1)

    def label(self) -> str:
        return self.last

    def summary(self) -> dict:
        return self.controller.summary()
