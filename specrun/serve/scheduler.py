"""Which waiting request gets the next free sequence: shortest predicted remaining time first, with
aging so that nothing starves, or first come, first served.

Serving the request that will finish soonest first minimises the mean completion time (SRPT), but
a long request could wait for ever behind a stream of short ones. Aging counts time waited
against predicted time: a request's key is its predicted seconds minus `aging` times the seconds
it has waited, so every request is served once those arriving after it have keys larger than its
own, at the latest (predicted seconds / aging) after it arrived.

A prediction is the request's prompt reading plus its remaining answer, in seconds: remaining
tokens are its max_tokens or, when its class has finished answers, the class's running mean
answer length if smaller; they take as many steps as the class's running tokens per step says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

SCHEDULES = ("srpt", "fcfs")
AGING = 0.5  # seconds of predicted time forgiven per second waited
DEFAULT_ANSWER_TOKENS = 256.0  # a class's answer length before any answer of it finished
ESTIMATE_DECAY = 0.9  # weight of the past in a class's running means

T = TypeVar("T")


@dataclass
class Waiting(Generic[T]):
    item: T
    arrival: float
    order: int


class Scheduler(Generic[T]):
    """A queue of waiting items; `pop` returns the one the schedule puts first."""

    def __init__(self, schedule: str = "srpt", *, aging: float = AGING):
        if schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {schedule!r}: use one of {', '.join(SCHEDULES)}")
        self.schedule = schedule
        self.aging = aging
        self._waiting: list[Waiting[T]] = []
        self._count = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def push(self, item: T, arrival: float) -> None:
        self._waiting.append(Waiting(item, arrival, self._count))
        self._count += 1

    def remove(self, item: T) -> bool:
        for i, waiting in enumerate(self._waiting):
            if waiting.item is item:
                del self._waiting[i]
                return True
        return False

    def items(self) -> list[T]:
        return [w.item for w in self._waiting]

    def key(self, waiting: Waiting[T], predict: Callable[[T], float]) -> tuple[float, int]:
        """Smaller goes first: arrival (fcfs), or predicted seconds − aging × seconds waited (srpt;
        written as predicted + aging × arrival, which orders the same at any moment)."""
        if self.schedule == "fcfs":
            return waiting.arrival, waiting.order
        return predict(waiting.item) + self.aging * waiting.arrival, waiting.order

    def order(self, predict: Callable[[T], float]) -> list[T]:
        """Every waiting item, first to be served first."""
        return [w.item for w in sorted(self._waiting, key=lambda w: self.key(w, predict))]

    def pop(self, predict: Callable[[T], float]) -> T:
        """Remove and return the item to serve next; predictions are taken now, so they use the
        latest estimates."""
        if not self._waiting:
            raise IndexError("pop from an empty scheduler")
        first = min(self._waiting, key=lambda w: self.key(w, predict))
        self._waiting.remove(first)
        return first.item


@dataclass
class ClassEstimate:
    """Running means of one request class: answer length and tokens per step."""

    answer_tokens: float | None = None
    tokens_per_step: float = 1.0
    answers: int = 0


@dataclass
class LengthEstimates:
    """Answer length and tokens per step by request class (an endpoint and a max_tokens scale), so
    a request is predicted from those like it."""

    classes: dict[Hashable, ClassEstimate] = field(default_factory=dict)
    decay: float = ESTIMATE_DECAY

    @staticmethod
    def class_of(kind: str, max_tokens: int | None) -> tuple[str, int | None]:
        """Requests of one endpoint whose max_tokens is of the same power of two are alike."""
        return kind, None if max_tokens is None else int(math.log2(max(1, max_tokens)))

    def observe(self, cls: Hashable, answer_tokens: int, steps: int) -> None:
        """A finished answer of this class: its length, and the decode steps it took after the first token."""
        est = self.classes.setdefault(cls, ClassEstimate())
        rate = max(1.0 / (est.answers + 1), 1.0 - self.decay)
        previous = est.answer_tokens if est.answer_tokens is not None else float(answer_tokens)
        est.answer_tokens = previous + rate * (answer_tokens - previous)
        if steps > 0:
            est.tokens_per_step += rate * (max(1.0, (answer_tokens - 1) / steps) - est.tokens_per_step)
        est.answers += 1

    def answer_tokens(self, cls: Hashable) -> float | None:
        """How long answers of this class ran (None before one finished)."""
        est = self.classes.get(cls)
        return est.answer_tokens if est is not None else None

    def remaining_tokens(self, cls: Hashable, max_tokens: int | None, generated: int = 0) -> float:
        """Tokens the answer is expected to still need."""
        est = self.classes.get(cls)
        expected = est.answer_tokens if est is not None and est.answer_tokens is not None else None
        if expected is None:
            expected = float(max_tokens) if max_tokens is not None else DEFAULT_ANSWER_TOKENS
        elif max_tokens is not None:
            expected = min(expected, float(max_tokens))
        return max(1.0, expected - generated)

    def tokens_per_step(self, cls: Hashable) -> float:
        est = self.classes.get(cls)
        return est.tokens_per_step if est is not None else 1.0


def predicted_seconds(
    prompt_tokens: int,
    remaining_tokens: float,
    tokens_per_step: float,
    *,
    prompt_token_seconds: float,
    step_seconds: float,
) -> float:
    """Seconds of service: reading the prompt, then the remaining tokens at the class's tokens per step."""
    return prompt_tokens * prompt_token_seconds + remaining_tokens / max(tokens_per_step, 1e-9) * step_seconds
